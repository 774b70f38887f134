"""SGLang's sampling keys in the engine on a tiny random model: allow_extra_properties,
stop_regex, logit_bias, sampling_seed (each checked against a run without the key, and
the engine's memory check after each)."""

from __future__ import annotations

import json
import random
import re

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
