"""Token healing (furca/runtime/token_healing.py): the planning rules on a small byte
vocabulary, and end to end on the default model (same text as a boundary-ending prompt,
boundary prompts untouched, a regex intersected with the healing prefix, KV accounting)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from furca.errors import SamplingParamsError
from furca.runtime.sampling_params import SamplingParams
from furca.runtime.token_healing import (HealingMatcher, VocabIndex, for_text_prompt, plan_healing,
                                        wants_healing)

VOCAB = [None, b"T", b"he", b" url", b" is", b" http", b":", b"://", b":/", b"/", b"//", b"s",
         b" Celsius", b"x", b"\xc3", b"\xc3\xa9", b"\xc3\xa9t", b" https"]


def ids_of(*pieces: bytes) -> list[int]:
    return [VOCAB.index(p) for p in pieces]


def test_vocab_index_prefix_queries():
    idx = VocabIndex(VOCAB)
    assert sorted(idx.starting_with(b":").tolist()) == ids_of(b":", b"://", b":/")
    assert idx.is_extended(b":") and idx.is_extended(b" http")
    assert not idx.is_extended(b" Celsius") and not idx.is_extended(b"://")
    assert idx.exactly(b"//").tolist() == ids_of(b"//") and idx.id_of(b"nope") is None


def test_plan_backs_up_only_extendable_tails():
    idx = VocabIndex(VOCAB)
    plan = plan_healing(ids_of(b"T", b" url", b" is", b" http", b":"), idx)
    assert plan.prefix == b":" and plan.text == ":"
    assert plan.kept_ids == tuple(ids_of(b"T", b" url", b" is", b" http"))
    assert plan_healing(ids_of(b"T", b" is", b" Celsius"), idx) is None  # no token extends it
    assert plan_healing(ids_of(b":"), idx) is None  # the first token is always kept
    assert plan_healing([*ids_of(b"x"), 0], idx) is None  # a special token is never backed up
    # ":" + "/" is extended by "://", so both go; "\xc3" alone is not whole UTF-8
    both = plan_healing(ids_of(b"x", b":", b"/"), idx)
    assert both.kept_ids == tuple(ids_of(b"x")) and both.prefix == b":/"
    assert plan_healing(ids_of(b"x", b"\xc3"), idx) is None


def test_wants_healing_defaults():
    assert wants_healing(SamplingParams(), is_text=True)
    assert not wants_healing(SamplingParams(), is_text=False)
    assert not wants_healing(SamplingParams(regex="[0-9]+"), is_text=True)
    assert wants_healing(SamplingParams(regex="[0-9]+", token_healing=True), is_text=True)
    assert wants_healing(SamplingParams(token_healing=True), is_text=False)
    assert not wants_healing(SamplingParams(token_healing=False), is_text=True)
    assert not wants_healing(SamplingParams(return_logprob=True, logprob_start_len=0), is_text=True)
    assert for_text_prompt(SamplingParams()).token_healing is True
    assert for_text_prompt(SamplingParams(regex="a")).token_healing is None
    assert for_text_prompt(SamplingParams(token_healing=False)).token_healing is False
    with pytest.raises(SamplingParamsError, match="token_healing"):
        SamplingParams(token_healing="yes")


def test_healing_matcher_spells_the_prefix():
    idx = VocabIndex(VOCAB)
    m = HealingMatcher(idx, b"://", on_done=(done := []).append)
    assert sorted(m.allowed().tolist()) == sorted(ids_of(b"://", b":", b":/"))
    bitmask = np.zeros((1, 1), dtype=np.int32)
    m.fill_bitmask(bitmask, 0)
    assert [t for t in range(len(VOCAB)) if bitmask[0, 0] >> t & 1] == sorted(ids_of(b":", b"://", b":/"))
    assert not m.accept_token(VOCAB.index(b"x"))
    assert m.accept_token(VOCAB.index(b":")) and m.left == b"//" and not done
    assert sorted(m.allowed().tolist()) == sorted(ids_of(b"//", b"/"))
    assert m.accept_token(VOCAB.index(b"//")) and m.left == b"" and done == [2]


# -- the default model ---------------------------------------------------------------------

GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine():
    from furca.runtime.engine import Engine

    with Engine(max_total_tokens=4096, check_memory=True, dtype="float32") as e:
        yield e


@pytest.mark.parametrize("cut,boundary,derails", [("The url is http:", "The url is http", True),
                                                  ("The capital of France is Par", "The capital of France is", False)])
def test_partial_token_prompt_matches_the_boundary_prompt(engine, cut, boundary, derails):
    healed = engine.generate(cut, sampling_params=GREEDY)
    plain = engine.generate(boundary, sampling_params={**GREEDY, "token_healing": False})
    n = len(engine.tokenizer.encode(cut, add_special_tokens=True))
    assert healed.meta_info["prompt_tokens"] == n - 1  # the partial token was backed up
    assert cut + healed.text == boundary + plain.text
    assert healed.output_ids == plain.output_ids
    raw = engine.generate(cut, sampling_params={**GREEDY, "token_healing": False})
    assert raw.meta_info["prompt_tokens"] == n
    if derails:  # without healing, "http:" is continued as a port number
        assert not (boundary + plain.text).startswith(cut + raw.text)


def test_boundary_prompt_is_unchanged(engine):
    prompt = "Water boils at 100 degrees Celsius"
    on = engine.generate(prompt, sampling_params={**GREEDY, "token_healing": True})
    off = engine.generate(prompt, sampling_params={**GREEDY, "token_healing": False})
    assert on.output_ids == off.output_ids and on.text == off.text
    assert on.meta_info["prompt_tokens"] == off.meta_info["prompt_tokens"]


def test_input_ids_heal_only_when_asked(engine):
    ids = engine.tokenizer.encode("The url is http:", add_special_tokens=True)
    plain = engine.generate(input_ids=ids, sampling_params=GREEDY)
    healed = engine.generate(input_ids=ids, sampling_params={**GREEDY, "token_healing": True})
    text = engine.generate("The url is http:", sampling_params=GREEDY)
    assert plain.meta_info["prompt_tokens"] == len(ids)
    assert healed.meta_info["prompt_tokens"] == len(ids) - 1 and healed.text == text.text


@pytest.mark.parametrize("pattern", [r"//[a-z]+\.[a-z]+", r"[0-9]{2,4}"])
def test_healing_intersects_a_regex(engine, pattern):
    out = engine.generate("The url is http:", sampling_params={**GREEDY, "ignore_eos": False, "regex": pattern,
                                                                "max_new_tokens": 12, "token_healing": True})
    assert out.meta_info["prompt_tokens"] == len(engine.tokenizer.encode("The url is http:")) - 1
    assert re.fullmatch(pattern, out.text), out.text
    assert engine.tokenizer.decode(out.output_ids).startswith(":")


def test_streamed_text_leaves_out_the_prefix(engine):
    deltas = list(engine.generate("The url is http:", sampling_params=GREEDY, stream=True))
    whole = engine.generate("The url is http:", sampling_params=GREEDY)
    assert "".join(d.text for d in deltas) == whole.text and not whole.text.startswith(":")


def test_kv_accounting_stays_clean(engine):
    prompts = ["The url is http:", "The capital of France is Par", "Water boils at 100 degrees Celsius"]
    outs = engine.generate(prompts * 2, sampling_params={**GREEDY, "n": 2})
    assert len(outs) == 12
    second = engine.generate("The url is http:", sampling_params=GREEDY)
    assert second.meta_info["cached_tokens"] == second.meta_info["prompt_tokens"] - 1  # the backed-up prompt is cached
    counts = engine.check_memory(idle=True)
    assert counts
