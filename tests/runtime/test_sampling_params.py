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
        ("max_new_tokens", -1, ">= 0"),
        ("n", 0, ">= 1"),
        ("top_logprobs_num", -1, ">= 0"),
        ("logprob_start_len", -2, ">= 0"),
        ("temperature", float("nan"), "finite"),
        ("temperature", "hot", "number"),
        ("max_new_tokens", 2.5, "integer"),
        ("max_new_tokens", True, "integer"),
        ("ignore_eos", 1, "true or false"),
        ("stop", [""], "non-empty"),
        ("stop", [1], "list of strings"),
        ("stop_token_ids", [-1], ">= 0"),
        ("stop_token_ids", ["a"], "list of ints"),
        ("seed", -1, "2**63"),
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
