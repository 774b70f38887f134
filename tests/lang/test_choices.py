"""Choice methods on fixed logprobs give their documented picks."""

from __future__ import annotations

import pytest

from furca.lang.choices import (
    decide, greedy_token_selection, mean_logprob, token_length_normalized, unconditional_likelihood_normalized,
)

CHOICES = ["Paris", "Paris, France", "London"]
# per option: its tokens' [logprob, token_id, text]
ENTRIES = [
    [[-1.0, 1, "Paris"]],
    [[-1.0, 1, "Paris"], [-0.2, 2, ","], [-0.1, 3, " France"]],
    [[-0.9, 4, "London"]],
]


def test_token_length_normalized_takes_the_best_mean():
    d = decide(token_length_normalized, CHOICES, ENTRIES)
    assert d.decision == "Paris, France"  # mean -0.433 beats -0.9 and -1.0
    assert d.meta_info["normalized_prompt_logprobs"] == pytest.approx([-1.0, -1.3 / 3, -0.9])


def test_greedy_token_selection_compares_position_by_position():
    # position 0: London (-0.9) beats both Paris options (-1.0)
    assert decide(greedy_token_selection, CHOICES, ENTRIES).decision == "London"
    # tie at position 0 between the Paris options; the short one is padded with its mean (-1.0)
    d = decide(greedy_token_selection, CHOICES[:2], ENTRIES[:2])
    assert d.decision == "Paris, France"
    assert d.meta_info["greedy_logprob_matrix"] == [[-1.0, -1.0, -1.0], [-1.0, -0.2, -0.1]]


def test_unconditional_likelihood_normalized_subtracts_the_prior():
    uncond = [
        [[None, 1, "Paris"]],  # first token unconditioned: counts as 0
        [[None, 1, "Paris"], [-0.1, 2, ","], [-0.05, 3, " France"]],
        [[None, 4, "London"]],
    ]
    d = decide(unconditional_likelihood_normalized, CHOICES, ENTRIES, uncond)
    # means of differences: -1.0, (-1.0 - 0.1 - 0.05) / 3 = -0.383, -0.9
    assert d.decision == "Paris, France"
    assert d.meta_info["normalized_unconditional_prompt_logprobs"] == pytest.approx([-1.0, -1.15 / 3, -0.9])
    with pytest.raises(ValueError, match="unconditional"):
        decide(unconditional_likelihood_normalized, CHOICES, ENTRIES)


def test_ties_go_to_the_first_option_and_none_is_skipped():
    same = [[[-0.5, 1, "a"]], [[-0.5, 2, "b"]]]
    assert decide(token_length_normalized, ["a", "b"], same).decision == "a"
    assert mean_logprob([[None, 1, "x"], [-2.0, 2, "y"]]) == -2.0
