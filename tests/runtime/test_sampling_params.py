import json

import pytest

from furca.errors import InvalidRequestError, SamplingParamsError
from furca.runtime.sampling_params import SamplingParams


def test_defaults_match_sglang():
    p = SamplingParams()
    assert (p.max_new_tokens, p.min_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (
        128, 0, 1.0, 1.0, -1, 0.0)
    assert (p.repetition_penalty, p.frequency_penalty, p.presence_penalty) == (1.0, 0.0, 0.0)
    assert p.stop == () and p.stop_token_ids == () and p.n == 1 and p.seed is None
    assert p.skip_special_tokens and p.spaces_between_special_tokens and not p.ignore_eos
    assert not p.has_constraint and p.constraint is None and not p.is_greedy


def test_normalisation_and_hashable():
    p = SamplingParams(stop="###", stop_token_ids=[2, 3], choices=["a", "b"])
    assert p.stop == ("###",) and p.stop_token_ids == (2, 3) and p.choices == ("a", "b")
    assert SamplingParams(stop=["x", "y"]).stop == ("x", "y")
    assert SamplingParams(stop=None).stop == ()
    assert SamplingParams(temperature=1).temperature == 1.0 and isinstance(SamplingParams(top_p=1).top_p, float)
    schema = {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}
    q = SamplingParams(json_schema=schema)
    assert isinstance(q.json_schema, str) and json.loads(q.json_schema) == schema
    assert list(json.loads(q.json_schema)["properties"]) == ["z", "a"]  # property order kept
    assert hash(q) == hash(SamplingParams(json_schema=schema)) and q == SamplingParams(json_schema=schema)
    assert q.constraint == ("json_schema", q.json_schema) and q.has_constraint
    assert SamplingParams(structural_tag={"k": 1}).structural_tag == '{"k": 1}'


def test_from_dict_and_to_dict_round_trip():
    d = {"max_new_tokens": 5, "temperature": 0.0, "stop": ["\n"], "regex": "[0-9]+", "top_k": None}
    p = SamplingParams.from_dict(d)
    assert p.max_new_tokens == 5 and p.stop == ("\n",) and p.regex == "[0-9]+" and p.top_k == -1
    assert p.is_greedy
    out = p.to_dict()
    assert out["stop"] == ["\n"] and json.dumps(out)
    assert SamplingParams.from_dict(out) == p
    assert SamplingParams.from_dict(None) == SamplingParams()
    assert SamplingParams.from_dict(p) is p
    assert SamplingParams.from_dict({"sampling_seed": 7}).seed == 7


def test_from_dict_unknown_key_names_it_and_lists_accepted():
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams.from_dict({"max_tokens": 3})
    msg = str(e.value)
    assert "'max_tokens'" in msg and "max_new_tokens" in msg and "temperature" in msg
    with pytest.raises(SamplingParamsError):
        SamplingParams.from_dict([("temperature", 1.0)])


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("temperature", -0.1, ">= 0"),
        ("top_p", 0.0, "(0, 1]"),
        ("top_p", 1.5, "(0, 1]"),
        ("top_k", -2, "-1"),
        ("min_p", 1.5, "[0, 1]"),
        ("repetition_penalty", 0.0, "> 0"),
        ("frequency_penalty", 2.5, "[-2, 2]"),
        ("presence_penalty", -3, "[-2, 2]"),
        ("max_new_tokens", -1, "[0, 2**31 - 1]"),
        ("max_new_tokens", 2**31, "[0, 2**31 - 1]"),
        ("n", 0, "[1, 1024]"),
        ("n", 1025, "[1, 1024]"),
        ("top_k", 2**31, "2**31 - 1"),
        ("top_logprobs_num", -1, "[0, 2**31 - 1]"),
        ("top_logprobs_num", 2**40, "[0, 2**31 - 1]"),
        ("logprob_start_len", -2, "[0, 2**31 - 1]"),
        ("stream_interval", 2**31, "[1, 2**31 - 1]"),
        ("temperature", float("nan"), "finite"),
        ("temperature", "hot", "number"),
        ("max_new_tokens", 2.5, "integer"),
        ("max_new_tokens", True, "integer"),
        ("ignore_eos", 1, "true or false"),
        ("stop", [""], "non-empty"),
        ("stop", [1], "list of strings"),
        ("stop_token_ids", [-1], "[0, 2**31)"),
        ("stop_token_ids", [100000000000000000000], "[0, 2**31)"),
        ("stop_token_ids", [True], "list of ints"),
        ("logit_bias", {2**64: 1.0}, "[0, 2**31)"),
        ("logit_bias", {True: 1.0}, "token ids"),
        ("stop_token_ids", ["a"], "list of ints"),
        ("seed", -2**63 - 1, "2**63"),
        ("seed", 2**63, "2**63"),
        ("seed", 1.5, "integer"),
        ("json_schema", "{not json", "valid JSON"),
        ("json_schema", 3, "JSON string"),
        ("regex", 3, "string"),
        ("choices", [], "non-empty"),
    ],
)
def test_validation_names_field_value_and_range(field, value, allowed):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**{field: value})
    msg = str(e.value)
    assert f"{field}=" in msg and allowed in msg, msg


def test_message_shows_the_value():
    with pytest.raises(SamplingParamsError, match=r"top_p=1\.5 .*in \(0, 1\]"):
        SamplingParams(top_p=1.5)
    with pytest.raises(SamplingParamsError, match=r"top_k=-5"):
        SamplingParams.from_dict({"top_k": -5})


def test_min_new_tokens_range_and_error_classes():
    with pytest.raises(SamplingParamsError, match=r"min_new_tokens=11.*max_new_tokens=10"):
        SamplingParams(max_new_tokens=10, min_new_tokens=11)
    assert SamplingParams(max_new_tokens=10, min_new_tokens=10).min_new_tokens == 10
    assert issubclass(SamplingParamsError, InvalidRequestError) and issubclass(SamplingParamsError, ValueError)


def test_at_most_one_constraint():
    with pytest.raises(SamplingParamsError, match="regex, choices"):
        SamplingParams(regex="a", choices=["a"])
    with pytest.raises(SamplingParamsError, match="json_schema, json_object"):
        SamplingParams(json_schema="{}", json_object=True)
    assert SamplingParams(json_object=True).constraint == ("json_object", True)
    assert SamplingParams(ebnf='root ::= "a"').has_constraint


def test_greedy_and_top_k_off():
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=1e-7).is_greedy
    assert SamplingParams(top_k=1).is_greedy
    assert not SamplingParams(top_k=0).is_greedy and not SamplingParams(top_k=2).is_greedy


def test_frozen_and_replace():
    p = SamplingParams()
    with pytest.raises(AttributeError):
        p.temperature = 0.5  # type: ignore[misc]
    q = p.replace(temperature=0.5, stop="x")
    assert q.temperature == 0.5 and q.stop == ("x",) and p.temperature == 1.0
    with pytest.raises(SamplingParamsError):
        p.replace(top_p=0)


def test_params_detokenizer_and_output_import_no_torch():
    import subprocess
    import sys

    code = ("import sys, furca.runtime.sampling_params, furca.runtime.detokenizer, furca.runtime.output; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_allow_extra_properties_validated_and_in_compile_key():
    assert SamplingParams().allow_extra_properties is None
    assert SamplingParams.from_dict({"allow_extra_properties": None}).allow_extra_properties is None
    with pytest.raises(SamplingParamsError, match="allow_extra_properties='no'"):
        SamplingParams(allow_extra_properties="no")
    schema = {"type": "object"}
    keys = {SamplingParams(json_schema=schema, allow_extra_properties=v).compile_key for v in (None, True, False)}
    assert len(keys) == 3
    assert SamplingParams(json_schema=schema, allow_extra_properties=False).compile_key == (
        "json_schema", '{"type": "object"}', (("allow_extra_properties", False),))
    # no schema in the constraint: the option changes nothing
    assert SamplingParams(regex="a", allow_extra_properties=False).compile_key == ("regex", "a", ())
    assert SamplingParams().compile_key is None


# SGLang 0.5.x SamplingParams, "API parameters" (srt/sampling/sampling_params.py)
SGLANG_API_KEYS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "beam_width",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias", "sampling_seed",
    "custom_params", "watermark",
)


def test_every_sglang_key_accepted_with_none_and_neutral_values():
    assert SamplingParams.from_dict(dict.fromkeys(SGLANG_API_KEYS)) == SamplingParams()
    # what sglang.lang's SglSamplingParams.to_srt_kwargs sends for a plain gen
    srt = {"max_new_tokens": 16, "min_new_tokens": 0, "n": 1, "stop": [], "stop_token_ids": [], "stop_regex": [],
           "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0,
           "presence_penalty": 0.0, "ignore_eos": False, "regex": None, "json_schema": None}
    p = SamplingParams.from_dict(srt)
    assert p.max_new_tokens == 16 and p.stop_regex == () and p.is_greedy
    neutral = {"beam_width": 1, "custom_params": {"k": [1, "x"]}, "stream_interval": 4, "logit_bias": {},
               "sampling_seed": -5, "spaces_between_special_tokens": False, "watermark": None, "top_k": 1 << 30}
    q = SamplingParams.from_dict(neutral)
    assert q.seed == -5 and q.stream_interval == 4 and q.logit_bias == () and not q.spaces_between_special_tokens
    hash(q)


@pytest.mark.parametrize("key, value, words", [
    ("beam_width", 4, "beam_width=4 is not supported"),
    ("beam_width", 0, "beam_width=0 is invalid"),
    ("watermark", {"enabled": True}, "watermark="),
    ("custom_params", [1], "custom_params="),
    ("stream_interval", 0, "stream_interval=0"),
    ("logit_bias", {"x": 1}, "token ids"),
    ("logit_bias", {"-3": 1}, "token ids"),
    ("logit_bias", {"5": 101}, "logit_bias['5']=101.0"),
    ("logit_bias", {"5": float("inf")}, "finite"),
    ("logit_bias", {"5": 1, 5: 2}, "given twice"),
    ("logit_bias", [1, 2], "logit_bias="),
    ("stop_regex", "(", "invalid pattern '('"),
    ("stop_regex", [r"a*"], "matches the empty string"),
    ("stop_regex", ["x" * 257], "over the 256-byte limit"),
    ("stop_regex", ["x"] * 33, "at most 32 patterns"),
    ("stop_regex", [3], "list of strings"),
    ("stop_regex", r"\p{Lu}", "(Python re syntax)"),
    ("stop_regex", r"(?:a{65535}){65535}", "unrolls to over 2000"),  # regex would need gigabytes
    ("stop_regex", r"((a{1000}){1000}){1000}", "unrolls to over 2000"),
    ("sampling_seed", 2**63, "seed=9223372036854775808"),
    ("speculative", 1, "unknown sampling parameter 'speculative'"),
])
def test_sglang_keys_refused_with_a_clear_error(key, value, words):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams.from_dict({key: value})
    assert words in str(e.value), str(e.value)


def test_unknown_key_message_lists_sglang_aliases_and_seed_given_twice():
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams.from_dict({"max_tokens": 3})
    assert "sampling_seed" in str(e.value) and "beam_width" in str(e.value)
    with pytest.raises(SamplingParamsError, match="given twice"):
        SamplingParams.from_dict({"seed": 1, "sampling_seed": 2})
    assert SamplingParams.from_dict({"seed": None, "sampling_seed": 2}).seed == 2


def test_stop_regex_and_logit_bias_normalised_hashable_round_trip():
    p = SamplingParams(stop_regex=r"\d+;", logit_bias={"7": 2, 3: -100, "+12": 0.5})
    assert p.stop_regex == (r"\d+;",) and p.logit_bias == ((3, -100.0), (7, 2.0), (12, 0.5))
    assert hash(p) == hash(SamplingParams(stop_regex=[r"\d+;"], logit_bias=[(12, 0.5), (7, 2.0), (3, -100)]))
    d = p.to_dict()
    assert d["logit_bias"] == {"3": -100.0, "7": 2.0, "12": 0.5} and d["stop_regex"] == [r"\d+;"]
    assert SamplingParams.from_dict(json.loads(json.dumps(d))) == p
    assert p.replace(temperature=0.5).logit_bias == p.logit_bias
    assert SamplingParams(stop_regex=[r"(?=x)", r"(?:ab){1,9}c"]).stop_regex == (r"(?=x)", r"(?:ab){1,9}c")
