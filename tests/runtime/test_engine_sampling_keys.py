"""SGLang's sampling keys in the engine on a tiny random model: allow_extra_properties,
member_order, stop_regex, logit_bias, sampling_seed (each checked against a run without the key, and
the engine's memory check after each)."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from furca.errors import InvalidRequestError, SamplingParamsError
from furca.runtime.engine import Engine
from furca.runtime.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def engine(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, chunked_prefill_size=16, check_memory=True) as e:
        yield e


def rand_ids(n: int, seed: int, vocab: int = 250) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def accepts(engine: Engine, params: SamplingParams, text: str) -> bool:
    """Whether a fresh matcher for ``params`` takes ``text``'s tokens and may end there."""
    m = engine.grammar_backend.create_matcher(params)
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    return all(m.accept_token(t) for t in ids) and m.accept_token(engine.eos_token_ids[0])


# ------------------------------------------------------------------ allow_extra_properties

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_allow_extra_properties_json_schema(engine):
    lax, strict = SamplingParams(json_schema=SCHEMA), SamplingParams(json_schema=SCHEMA, allow_extra_properties=False)
    assert lax.compile_key != strict.compile_key and lax.constraint == strict.constraint
    assert SamplingParams(json_schema=SCHEMA, allow_extra_properties=True).compile_key != lax.compile_key
    backend = engine.grammar_backend
    assert backend.compile(strict) is not backend.compile(lax)  # never one cache entry
    assert backend.compile(strict) is backend.compile(strict.replace(max_new_tokens=3))  # but cached
    assert accepts(engine, lax, '{"a":1,"b":2}') and accepts(engine, lax, '{"a":1}')
    assert not accepts(engine, strict, '{"a":1,"b":2}') and accepts(engine, strict, '{"a":1}')
    # the schema's own additionalProperties wins over the option
    own = {**SCHEMA, "additionalProperties": True}
    assert accepts(engine, SamplingParams(json_schema=own, allow_extra_properties=False), '{"a":1,"b":2}')
    # strict greedy generation validates with no extra member
    out = engine.generate("Hello", sampling_params={"json_schema": SCHEMA, "allow_extra_properties": False,
                                                    "temperature": 0, "max_new_tokens": 40})
    if out.meta_info["finish_reason"]["type"] == "stop":
        assert set(json.loads(out.text)) == {"a"}
    engine.check_memory(idle=True)


def test_allow_extra_properties_structural_tag(engine):
    tag = {"structures": [{"begin": "<f>", "schema": SCHEMA, "end": "</f>"}], "triggers": ["<f>"]}
    lax = SamplingParams(structural_tag=tag)
    strict = SamplingParams(structural_tag=tag, allow_extra_properties=False)
    assert engine.grammar_backend.compile(strict) is not engine.grammar_backend.compile(lax)
    assert accepts(engine, lax, 'x <f>{"a":1,"b":2}</f> y')
    assert not accepts(engine, strict, 'x <f>{"a":1,"b":2}</f> y')
    assert accepts(engine, strict, 'x <f>{"a":1}</f> y')


# ------------------------------------------------------------------------------ member_order

ORDERED = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}


def test_member_order_any(engine):
    plain, anyorder = SamplingParams(json_schema=ORDERED), SamplingParams(json_schema=ORDERED, member_order="any")
    assert plain.compile_key != anyorder.compile_key
    assert SamplingParams(json_schema=ORDERED, member_order="schema").compile_key == plain.compile_key
    assert not accepts(engine, plain, '{"b":"x","a":1}') and accepts(engine, anyorder, '{"b":"x","a":1}')
    assert not accepts(engine, anyorder, '{"b":"x","a":1,"b":"y"}')  # each key once
    assert not accepts(engine, anyorder, '{"b":"x"}')  # required a
    with pytest.raises(SamplingParamsError, match="member_order"):
        SamplingParams(json_schema=ORDERED, member_order="random")
    out = engine.generate("Hello", sampling_params={"json_schema": ORDERED, "member_order": "any",
                                                    "temperature": 0, "max_new_tokens": 40})
    if out.meta_info["finish_reason"]["type"] == "stop":  # a finished text: valid, each key once
        pairs = json.loads(out.text, object_pairs_hook=lambda kv: kv)
        assert len({k for k, _ in pairs}) == len(pairs)
        jsonschema.validate(json.loads(out.text), ORDERED)
    engine.check_memory(idle=True)


# ------------------------------------------------------------------------------ stop_regex

GREEDY = {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True}


def fixed_length_pattern(text: str, start: int, length: int = 6) -> str:
    """A pattern with regex features (a class, a count) of a fixed length that matches
    ``text[start : start + length]``: its leftmost match in the final text is also the
    first one a step-by-step search meets."""
    s = text[start:start + length]
    return re.escape(s[:2]) + r"[\s\S]{%d}" % (length - 3) + re.escape(s[-1])


@pytest.fixture(scope="module")
def base(engine):
    """A prompt and its greedy output (the random model's text has byte fragments too)."""
    ids = engine.tokenizer.encode("def add(a, b):", add_special_tokens=True)
    out = engine.generate(input_ids=ids, sampling_params=GREEDY)
    assert len(out.text) > 24
    return ids, out


@pytest.mark.parametrize("start", [3, 11])
def test_stop_regex_cuts_the_greedy_output_where_it_first_matches(engine, base, start):
    ids, full = base
    pattern = fixed_length_pattern(full.text, start)
    m = re.search(pattern, full.text)
    out = engine.generate(input_ids=ids, sampling_params={**GREEDY, "stop_regex": pattern})
    assert out.meta_info["finish_reason"] == {"type": "stop", "matched": pattern}
    assert out.text == full.text[:m.start()]
    assert out.output_ids == full.output_ids[:len(out.output_ids)] and len(out.output_ids) < len(full.output_ids)
    kept = engine.generate(input_ids=ids, sampling_params={**GREEDY, "stop_regex": [pattern], "no_stop_trim": True})
    assert kept.text == full.text[:m.end()]
    engine.check_memory(idle=True)


def test_stop_regex_streaming_never_shows_the_match(engine, base):
    ids, full = base
    pattern = fixed_length_pattern(full.text, 9, length=8)
    m = re.search(pattern, full.text)
    deltas = list(engine.generate(input_ids=ids, sampling_params={**GREEDY, "stop_regex": pattern}, stream=True))
    assert deltas[-1].finished and deltas[-1].meta_info["finish_reason"]["matched"] == pattern
    streamed = ""
    for d in deltas:
        streamed += d.text
        assert full.text[:m.start()].startswith(streamed)  # never a character of the match
    assert streamed == full.text[:m.start()]
    engine.check_memory(idle=True)


def test_stop_regex_with_min_new_tokens_skips_early_matches(engine, base):
    ids, full = base
    first, later = full.text[0], full.text[len(full.text) // 2]
    pattern = f"{re.escape(first)}|{re.escape(later)}"  # matches at once, and again later on
    early = engine.generate(input_ids=ids, sampling_params={**GREEDY, "stop_regex": pattern})
    assert early.text == "" and early.meta_info["finish_reason"]["matched"] == pattern
    late = engine.generate(input_ids=ids, sampling_params={**GREEDY, "stop_regex": pattern, "min_new_tokens": 5})
    assert len(late.output_ids) >= 5 and late.output_ids == full.output_ids[:len(late.output_ids)]
    assert full.text.startswith(late.text) and 0 < len(late.text) <= len(full.text) // 2
    assert late.meta_info["finish_reason"]["matched"] == pattern
    assert re.match(pattern, full.text[len(late.text):])  # cut where a later match begins
    engine.check_memory(idle=True)


def test_stop_regex_inside_jump_forward_text(engine):
    params = {"regex": r"The (quick|lazy) fox jumps over it\.", "stop_regex": r"j\w+s", "temperature": 0,
              "max_new_tokens": 40}
    out = engine.generate("Hello", sampling_params=params)
    assert re.fullmatch(r"The (quick|lazy) fox ", out.text), out.text
    assert out.meta_info["finish_reason"] == {"type": "stop", "matched": r"j\w+s"}
    assert out.meta_info["jump_forward_tokens"] > 0
    deltas = list(engine.generate("Hello", sampling_params=params, stream=True))
    assert "".join(d.text for d in deltas) == out.text
    engine.check_memory(idle=True)


def test_pathological_stop_regex_aborts_that_request_only(engine):
    a = engine.tokenizer.encode("a", add_special_tokens=False)
    assert len(a) == 1
    params = {"temperature": 0, "max_new_tokens": 120, "ignore_eos": True, "logit_bias": {a[0]: 100},
              "stop_regex": r"(a|a)+b"}
    good = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    bad_out, good_out = engine.generate(["Hello", "Paris is"], sampling_params=[params, good])
    reason = bad_out.meta_info["finish_reason"]
    assert reason["type"] == "abort" and "(a|a)+b" in reason["message"], reason
    assert set(bad_out.text) == {"a"} and len(bad_out.output_ids) < 120
    assert good_out.meta_info["finish_reason"]["type"] == "length" and len(good_out.output_ids) == 8
    engine.check_memory(idle=True)


def test_invalid_stop_regex_is_a_clear_error_and_holds_nothing(engine):
    with pytest.raises(SamplingParamsError, match=r"invalid pattern '\(a'"):
        engine.generate("Hello", sampling_params={"stop_regex": ["ok", "(a"]})
    engine.check_memory(idle=True)


# ------------------------------------------------------------------------------ logit_bias


def test_logit_bias_forces_and_bans_under_greedy(engine, base):
    ids, full = base
    first = full.output_ids[0]
    forced = next(t for t in range(3, 250) if t not in full.output_ids)
    out = engine.generate(input_ids=ids, sampling_params={**GREEDY, "max_new_tokens": 6,
                                                          "logit_bias": {str(forced): 100}})
    assert out.output_ids == [forced] * 6
    out = engine.generate(input_ids=ids, sampling_params={**GREEDY, "max_new_tokens": 6, "logit_bias": {first: -100}})
    assert first not in out.output_ids and out.output_ids != full.output_ids[:6]
    # a small bias only where the model is undecided does nothing else: 0 bias == no bias
    same = engine.generate(input_ids=ids, sampling_params={**GREEDY, "logit_bias": {first: 0}})
    assert same.output_ids == full.output_ids
    engine.check_memory(idle=True)


def test_logit_bias_with_a_grammar_mask_and_sampling(engine):
    digits = [engine.tokenizer.encode(str(d), add_special_tokens=False) for d in range(10)]
    assert all(len(t) == 1 for t in digits)
    seven = digits[7][0]
    letter = engine.tokenizer.encode("x", add_special_tokens=False)[0]
    params = {"regex": "[0-9]{4}", "temperature": 1.0, "seed": 3, "max_new_tokens": 10,
              "logit_bias": {seven: 100, letter: 100}}
    out = engine.generate("Hello", sampling_params=params)
    assert out.text == "7777"  # the mask wins over +100 on "x"; +100 on "7" wins inside it
    banned = engine.generate("Hello", sampling_params={**params, "logit_bias": {seven: -100}, "n": 3})
    assert all(re.fullmatch("[0-9]{4}", o.text) and "7" not in o.text for o in banned)
    engine.check_memory(idle=True)


def test_logit_bias_outside_the_vocabulary_is_rejected(engine):
    vocab = engine.generate("Hi", sampling_params={"max_new_tokens": 1}).meta_info  # the engine works
    assert vocab
    with pytest.raises(InvalidRequestError, match=r"logit_bias names token id 100000"):
        engine.generate("Hello", sampling_params={"logit_bias": {"100000": 5}})
    with pytest.raises(SamplingParamsError, match=r"logit_bias\['3'\]=-150"):
        engine.generate("Hello", sampling_params={"logit_bias": {"3": -150}})
    engine.check_memory(idle=True)


# --------------------------------------------------------------------------- sampling_seed


def test_sampling_seed_reproduces_with_n(engine):
    params = {"temperature": 1.0, "max_new_tokens": 10, "ignore_eos": True, "n": 3}
    one = engine.generate("The quick brown", sampling_params={**params, "sampling_seed": 1234})
    two = engine.generate("The quick brown", sampling_params={**params, "sampling_seed": 1234})
    assert [o.output_ids for o in one] == [o.output_ids for o in two]
    assert len({tuple(o.output_ids) for o in one}) > 1  # the n samples differ (seed + i)
    as_seed = engine.generate("The quick brown", sampling_params={**params, "seed": 1234})
    assert [o.output_ids for o in as_seed] == [o.output_ids for o in one]  # an alias of seed
    other = engine.generate("The quick brown", sampling_params={**params, "sampling_seed": 99})
    assert [o.output_ids for o in other] != [o.output_ids for o in one]
    neg = [engine.generate("The quick brown", sampling_params={**params, "n": 1, "sampling_seed": -7}).output_ids
           for _ in range(2)]
    assert neg[0] == neg[1]
    engine.check_memory(idle=True)
