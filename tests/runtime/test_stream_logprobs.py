"""Per-token logprobs in stream deltas (`StreamDelta.output_token_logprobs` and friends).

The invariant: applying every delta's logprob segment in order (`apply_logprobs`, with
its ``logprob_retract``) gives exactly the final meta_info's ``output_token_logprobs`` /
``output_top_logprobs``, for plain sampling, greedy, n > 1, stop strings, stop_regex and
constrained requests whose forced text is re-tokenized (jump-forward); after every delta
the ids and the entries streamed so far have the same length (forced tokens wait for the
pass that scores them); entries before a delta's ``settled`` never change later; the
prompt's logprobs come once, in the first delta. Streamed results equal non-streamed ones.
"""

from __future__ import annotations

import pytest

from furca.runtime.engine import Engine
from furca.runtime.output import LogprobCursor, StreamDelta

PROMPTS = ["Hello", "The quick brown fox", '{"name": "furca"', "Paris is"]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "version": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["llm", "json"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "version", "tags", "ok"],
    "additionalProperties": False,
}
REGEX = r'\{"name": "[a-z]{1,8}", "version": [0-9]{1,3}\}'


@pytest.fixture(scope="module")
def engine(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True) as e:
        yield e


def replay(deltas: list[StreamDelta], top: bool) -> dict:
    """Apply every delta in order, checking the per-delta invariants; returns the totals."""
    ids: list[int] = []
    entries: list = []
    tops: list | None = [] if top else None
    settled_prefix: list = []  # entries some delta declared settled
    num_retracted = 0
    inputs = []
    for d in deltas:
        assert d.output_token_logprobs is not None and (d.output_top_logprobs is not None) == top
        assert 0 <= d.logprob_retract <= len(entries)
        assert entries[: len(entries) - d.logprob_retract][: len(settled_prefix)] == settled_prefix
        d.apply_ids(ids)
        d.apply_logprobs(entries, tops)
        num_retracted += d.logprob_retract
        if d.input_token_logprobs is not None:
            inputs.append((d.input_token_logprobs, d.input_top_logprobs))
        # every id streamed so far has its entry, and entries follow the ids
        assert [e[1] for e in entries] == ids, (d, ids, entries)
        if top:
            assert len(tops) == len(entries)
        if d.settled is not None:
            assert len(settled_prefix) <= d.settled <= len(ids)
            settled_prefix = list(entries[: d.settled])
    assert deltas[-1].finished and all(not d.finished for d in deltas[:-1])
    return {"ids": ids, "entries": entries, "tops": tops, "retracted": num_retracted, "inputs": inputs,
            "text": "".join(d.text for d in deltas), "meta": deltas[-1].meta_info}


def check_stream(engine: Engine, prompt, params: dict) -> dict:
    top = params.get("top_logprobs_num", 0) > 0
    out = replay(list(engine.generate(prompt, sampling_params=params, stream=True)), top)
    meta = out["meta"]
    assert out["entries"] == meta["output_token_logprobs"]
    if top:
        assert out["tops"] == meta["output_top_logprobs"]
    assert out["ids"] == [e[1] for e in meta["output_token_logprobs"]]
    assert len(out["inputs"]) == (1 if params.get("logprob_start_len", -1) >= 0 else 0)
    for got, _tops in out["inputs"]:
        assert got == meta["input_token_logprobs"]
        if top:
            assert _tops == meta["input_top_logprobs"]
    # the same request, not streamed: the same tokens and logprobs
    plain = engine.generate(prompt, sampling_params=params)
    assert plain.output_ids == out["ids"] and plain.text == out["text"]
    assert [e[1:] for e in plain.meta_info["output_token_logprobs"]] == [e[1:] for e in out["entries"]]
    assert [e[0] for e in plain.meta_info["output_token_logprobs"]] == \
        pytest.approx([e[0] for e in out["entries"]], abs=1e-5)
    return out


# ----------------------------------------------------------------------- the pieces


def test_apply_logprobs_takes_back_then_appends():
    entries, tops = [[-1.0, 5, "a"], [-2.0, 6, "b"]], [None, [[-0.5, 7, "c"]]]
    d = StreamDelta("r", "x", [9], output_token_logprobs=[[-3.0, 9, "x"]], output_top_logprobs=[None],
                    logprob_retract=1)
    assert d.apply_logprobs(entries, tops) == [[-1.0, 5, "a"], [-3.0, 9, "x"]]
    assert tops == [None, None]
    assert StreamDelta("r", "", []).apply_logprobs(entries) == entries  # no logprobs: a no-op
    with pytest.raises(ValueError, match="exceeds"):
        StreamDelta("r", "", [], output_token_logprobs=[], logprob_retract=3).apply_logprobs(entries)


def test_cursor_resends_from_the_lowest_deleted_entry():
    c = LogprobCursor()
    assert c.take(3) == (0, 0)  # first delta: entries 0..3
    assert c.take(5) == (0, 3)
    c.deleted_from(4)
    c.deleted_from(6)  # an entry not sent yet: the lowest one counts
    assert c.take(7) == (1, 4)  # drop the stale entry 4, send 4..7
    c.deleted_from(7)
    assert c.take(7) == (0, 7)  # deleted and not resent: nothing to take back
    c.deleted_from(2)
    assert c.take(2) == (5, 2)


# ----------------------------------------------------------------------- unconstrained


@pytest.mark.parametrize("params", [
    {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True},
    {"temperature": 1.0, "seed": 3, "max_new_tokens": 24, "top_logprobs_num": 3},
    {"temperature": 0.8, "top_p": 0.9, "seed": 5, "max_new_tokens": 20, "top_logprobs_num": 2,
     "return_text_in_logprobs": True, "logprob_start_len": 0},
    {"temperature": 0.0, "max_new_tokens": 30, "stop": ["o", "e"], "ignore_eos": True},
    {"temperature": 1.0, "seed": 2, "max_new_tokens": 30, "stop_regex": [r"[0-9]{2}", r"\n"],
     "top_logprobs_num": 1, "ignore_eos": True},
], ids=["greedy", "sampled-top", "text-and-prompt", "stop-string", "stop-regex"])
def test_stream_segments_add_up_to_the_final_logprobs(engine, params):
    params = {**params, "return_logprob": True}
    for prompt in PROMPTS[:3]:
        out = check_stream(engine, prompt, params)
        assert out["retracted"] == 0 and out["ids"]
        if "stop" in params and out["meta"]["finish_reason"]["type"] == "stop":
            # the stop string's tokens are output tokens, with their logprobs, though cut from the text
            assert len(out["entries"]) == out["meta"]["completion_tokens"]
    engine.check_memory(idle=True)


def test_n_samples_each_stream_their_own_logprobs(engine):
    params = {"temperature": 1.0, "seed": 11, "n": 3, "max_new_tokens": 16, "return_logprob": True,
              "top_logprobs_num": 2, "logprob_start_len": 0}
    deltas = list(engine.generate("Paris is", sampling_params=params, stream=True))
    assert sorted({d.index for d in deltas}) == [0, 1, 2]
    for i in range(3):
        out = replay([d for d in deltas if d.index == i], top=True)
        assert out["entries"] == out["meta"]["output_token_logprobs"] and len(out["inputs"]) == 1
    plain = engine.generate("Paris is", sampling_params=params)
    assert [o.output_ids for o in plain] == [replay([d for d in deltas if d.index == i], True)["ids"]
                                             for i in range(3)]
    engine.check_memory(idle=True)


def test_deltas_without_return_logprob_carry_none(engine):
    deltas = list(engine.generate("Hello", sampling_params={"max_new_tokens": 6, "temperature": 0}, stream=True))
    assert all(d.output_token_logprobs is None and d.input_token_logprobs is None and d.logprob_retract == 0
               and d.settled is None for d in deltas)


# ----------------------------------------------------------------------- constrained, jump-forward


def test_jump_forward_streams_exact_logprobs_through_re_tokenization(engine):
    """Forced text re-tokenizes tokens already streamed (their entries go back through
    ``logprob_retract``) and forced tokens are scored a pass later (their ids wait):
    the segments still add up, and settled entries never change."""
    retracted = forced = 0
    for seed, prompt in enumerate(PROMPTS):
        for constraint in ({"json_schema": SCHEMA}, {"regex": REGEX}):
            params = {**constraint, "temperature": 1.0 if seed else 0.0, "seed": seed, "max_new_tokens": 80,
                      "return_logprob": True, "top_logprobs_num": 2 if seed % 2 else 0}
            out = check_stream(engine, prompt, params)
            retracted += out["retracted"]
            forced += out["meta"]["jump_forward_tokens"]
    assert forced > 0
    assert retracted > 0  # the retraction path really ran (`[` `"` `j` + forced `son"` ...)
    engine.check_memory(idle=True)


@pytest.mark.parametrize("params", [
    {"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": 13},
    {"regex": r'\{"name": "[a-z]{1,8}"\}', "stop": ["name"], "temperature": 0, "max_new_tokens": 30,
     "logprob_start_len": 0},
    {"regex": r'\{"name": "[a-z]{1,8}", "version": [0-9]\}', "stop": ["version"], "temperature": 0,
     "max_new_tokens": 30},
], ids=["length-on-forced", "stop-before-first-pass", "stop-in-forced"])
def test_requests_ending_on_forced_tokens(engine, params):
    out = check_stream(engine, "Hello", {**params, "return_logprob": True, "top_logprobs_num": 2})
    assert out["meta"]["jump_forward_tokens"] > 0
    assert len(out["entries"]) == len(out["ids"]) == out["meta"]["completion_tokens"]
    engine.check_memory(idle=True)


def test_settled_lags_only_constrained_requests(engine):
    params = {"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": 60, "return_logprob": True}
    deltas = list(engine.generate("Hello", sampling_params=params, stream=True))
    ids: list[int] = []
    lags = []
    for d in deltas[:-1]:
        d.apply_ids(ids)
        lags.append(len(ids) - d.settled)
    assert lags and all(0 <= lag < 6 for lag in lags) and max(lags) > 0
    assert deltas[-1].settled is None  # the end: everything is settled
