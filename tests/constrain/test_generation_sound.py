"""Soundness by generation: whatever a model samples under furca's masks is a valid
instance. Random token walks (generation.walk: EOS when allowed, otherwise a random
allowed token, biased towards closing bytes so that walks end) over the vendored
100-schema MaskBench sample with the real Llama-3.1 tokenizer; every finished text must
be JSON that `jsonschema` validates against the schema (its own draft, the formats
whose checkers are installed). bench/constrain_fuzz.py runs the same over all of
maskbench-dev. At every step the walks also probe tokens they do not take (generation.walk's
probes: allowed ones accepted, their disallowed byte-order neighbours refused)."""
import numpy as np
import pytest

from furca.constrain import CompileError

from .generation import byte_neighbours, check_text, closer_tokens, declared_names, make_validator, walk
from .test_json_schema_helpers import maskbench_cases

DRAFT4 = "http://json-schema.org/draft-04/schema#"


@pytest.fixture(scope="module")
def closer(llama):
    return closer_tokens(llama[0])


@pytest.fixture(scope="module")
def near(llama):
    return byte_neighbours(llama[0])


def _walks(compiler, info, closer, schema, n, seed, max_steps=300, near=None):
    """(finished texts, failures) of n random walks of schema's grammar (probing two
    tokens a step where near, generation.byte_neighbours, is given)."""
    g = compiler.compile_json_schema(schema)
    validator, declared = make_validator(schema), declared_names(schema)
    rng = np.random.default_rng(seed)
    done, bad = 0, []
    for _ in range(n):
        kind, data = walk(g, info, info.eos_token_id, closer, rng, max_steps, 2 if near else 0, near)
        if kind == "finished":
            done += 1
            problem = check_text(data, validator, declared)
            if problem is not None and problem[0] != "duplicate_free":
                bad.append((problem, data))
        elif kind != "unfinished":
            bad.append((kind, data))
    return done, bad


def test_random_walks_of_the_maskbench_sample_are_valid(llama, closer, near):
    info, compiler, _ = llama
    compiled = finished = 0
    failures = []
    for i, (name, schema, _tests) in enumerate(maskbench_cases()):
        try:
            done, bad = _walks(compiler, info, closer, schema, 2, [14, i], near=near)
        except CompileError:
            continue
        compiled += 1
        finished += done
        failures += [(name, b) for b in bad]
    assert compiled >= 99 and finished >= 150, (compiled, finished)
    assert not failures, failures[:3]


def test_the_checks_catch_what_they_name():
    v = make_validator({"$schema": DRAFT4, "type": "object", "properties": {"a": {"type": "integer"}}})
    names = declared_names({"properties": {"a": {}}})
    assert check_text(b'{"a":1}', v, names) is None
    assert check_text(b'{"a":1.0}', v, names)[0] == "not_valid"  # draft-04: 1.0 is no integer
    assert check_text(b'{"a":1,"a":2}', v, names)[0] == "duplicate_declared"
    assert check_text(b'{"b":1,"b":2}', v, names)[0] == "duplicate_free"
    two = make_validator({"type": "object", "minProperties": 2})
    assert check_text(b'{"b":1,"b":2}', two)[0] == "not_valid"  # one member as parsed
    assert check_text(b'{"a":NaN}', v, names)[0] == "invalid_json"
    assert check_text(b'{"a":1', v, names)[0] == "invalid_json"
    assert check_text(b'"\xff"', None)[0] == "bad_utf8"
    cents = make_validator({"type": "number", "multipleOf": 0.01})
    assert check_text(b"1093041464.58", cents) is None  # jsonschema's float division says otherwise
    assert check_text(b"1093041464.585", cents)[0] == "not_valid"


def test_walks_reach_the_draft4_integral_enum(llama, closer):
    """The bug the generation fuzz found (maskbench-dev o21860): under draft-04's
    `integer`, an enum value was also allowed as 731.0. Walks of such a schema end in
    both short spellings often enough that the old grammar failed this."""
    info, compiler, _ = llama
    schema = {"$schema": DRAFT4, "type": "object", "required": ["d"],
              "properties": {"d": {"type": "integer", "enum": [1, 731]}}, "additionalProperties": False}
    done, bad = _walks(compiler, info, closer, schema, 40, 3)
    assert done >= 30 and not bad, bad[:3]


def test_the_probes_catch_a_mask_that_disagrees_with_accept_token():
    """generation._probe on a real matcher, handed a mask that lies: a token it calls
    allowed that accept_token refuses, and an allowed token left out (found as the byte-
    order neighbour of an allowed one)."""
    from furca.constrain import GrammarCompiler

    from .conftest import byte_info
    from .generation import _probe

    info = byte_info(["ab", "abc"])
    m = GrammarCompiler(info).compile_json_schema({"enum": ["ab", "ax"]}).matcher()
    assert m.accept_token(ord('"'))
    allowed = m.get_allowed_tokens()
    ab = info.token_bytes.index(b"ab")
    assert ord("a") in allowed and ab in allowed
    rng, near = np.random.default_rng(0), byte_neighbours(info)
    assert _probe(m, info, allowed, rng, 4, near, [b'"']) is None
    assert _probe(m, info, np.array([ord("z")]), rng, 1, near, [b'"'])[0] == "probe_refused"
    assert _probe(m, info, np.array([ord("a")]), rng, 1, near, [b'"'])[0] == "probe_accepted"  # "ab" left out
