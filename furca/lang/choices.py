"""How ``select`` picks among scored options (SGLang's choice methods, same interface).

A method is called with keyword arguments, per option in input order:

- ``choices``: the options;
- ``normalized_prompt_logprobs``: mean logprob of the option's tokens given the prefix;
- ``input_token_logprobs``: the option's tokens as ``[logprob, token_id, text|None]``
  (the first may straddle the prefix/option boundary when the tokenizer merges them);
- ``output_token_logprobs``: ``[]`` (nothing is generated);
- ``unconditional_token_logprobs``: the same tokens scored without the prefix (first
  entry's logprob ``None``), only for methods with ``requires_unconditional_logprobs``.

and returns a `ChoicesDecision`. Ties go to the earliest option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class ChoicesDecision:
    decision: str
    meta_info: dict[str, Any] | None = None


def _argmax_first(values: Sequence[float]) -> int:
    if not values:
        raise ValueError("no options to choose from")
    return max(range(len(values)), key=values.__getitem__)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("-inf")


def _logprobs(entries: Sequence[Sequence[Any]]) -> list[float]:
    return [e[0] for e in entries if e[0] is not None]


def mean_logprob(entries: Sequence[Sequence[Any]]) -> float:
    """Mean of the entries' logprobs, skipping ``None`` (an unscored first token)."""
    return _mean(_logprobs(entries))


class ChoicesSamplingMethod:
    requires_unconditional_logprobs = False

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


class TokenLengthNormalized(ChoicesSamplingMethod):
    """The option with the highest mean token logprob."""

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        best = choices[_argmax_first(normalized_prompt_logprobs)]
        return ChoicesDecision(best, {
            "normalized_prompt_logprobs": list(normalized_prompt_logprobs),
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": output_token_logprobs,
        })


class GreedyTokenSelection(ChoicesSamplingMethod):
    """Compare options token by token, keeping those with the best logprob at each
    position until one remains. A shorter option is padded with its own mean logprob."""

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        width = max(len(option) for option in input_token_logprobs)
        matrix = []
        for option in input_token_logprobs:
            row = [e[0] if e[0] is not None else 0.0 for e in option]
            matrix.append(row + [_mean(row)] * (width - len(row)))
        remaining = list(range(len(choices)))
        for j in range(width):
            best = max(matrix[i][j] for i in remaining)
            remaining = [i for i in remaining if matrix[i][j] == best]
            if len(remaining) == 1:
                break
        return ChoicesDecision(choices[remaining[0]], {
            "normalized_prompt_logprobs": list(normalized_prompt_logprobs),
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": output_token_logprobs,
            "greedy_logprob_matrix": matrix,
        })


class UnconditionalLikelihoodNormalized(ChoicesSamplingMethod):
    """The option with the highest mean of (logprob given the prefix − logprob without
    it) over its tokens; the unconditional first token (no context) counts as 0."""

    requires_unconditional_logprobs = True

    def __call__(self, *, choices, normalized_prompt_logprobs, input_token_logprobs,
                 output_token_logprobs, unconditional_token_logprobs=None) -> ChoicesDecision:
        if unconditional_token_logprobs is None:
            raise ValueError("unconditional_likelihood_normalized needs unconditional_token_logprobs")
        scores = []
        for cond, uncond in zip(input_token_logprobs, unconditional_token_logprobs):
            if len(cond) != len(uncond):
                raise ValueError("conditional and unconditional token logprobs differ in length")
            diffs = [(c[0] or 0.0) - (u[0] or 0.0) for c, u in zip(cond, uncond)]
            scores.append(_mean(diffs))
        return ChoicesDecision(choices[_argmax_first(scores)], {
            "normalized_prompt_logprobs": list(normalized_prompt_logprobs),
            "input_token_logprobs": input_token_logprobs,
            "output_token_logprobs": output_token_logprobs,
            "unconditional_token_logprobs": unconditional_token_logprobs,
            "normalized_unconditional_prompt_logprobs": scores,
        })


token_length_normalized = TokenLengthNormalized()
greedy_token_selection = GreedyTokenSelection()
unconditional_likelihood_normalized = UnconditionalLikelihoodNormalized()


def decide(method, choices: Sequence[str], entries: list[list[list[Any]]],
           unconditional: list[list[list[Any]]] | None = None) -> ChoicesDecision:
    """Run ``method`` on per-option token entries (what every backend's select ends with)."""
    return method(
        choices=list(choices),
        normalized_prompt_logprobs=[mean_logprob(e) for e in entries],
        input_token_logprobs=entries,
        output_token_logprobs=[[] for _ in entries],
        unconditional_token_logprobs=unconditional,
    )
