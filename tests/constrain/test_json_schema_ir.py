"""The JSON-schema compile path: the translator's rules go to `furca.constrain.ir`
directly (json_schema/lower.py), with no GBNF text in between.

- For every schema of the MaskBench sample (both extra-member modes, both whitespace
  modes) and a few hand-made ones, the lowered IR equals what the engine's GBNF parser
  makes of `schema_to_gbnf`'s text for the same schema: the automaton compiles the
  same rules whichever way, so the language the GBNF tests check is the language the
  engine enforces.
- compile_json_schema / compile_json_object / compile_structural_tag never parse GBNF
  text (the GBNF parser is made to fail while they compile).
"""
from __future__ import annotations

import pytest

from furca.constrain import GrammarCompiler, gbnf, ir, key_trie
from furca.constrain.json_schema import schema_to_gbnf, schema_to_ir
from furca.errors import CompileError

from .conftest import BYTE_EOS, byte_info, walk_ids
from .test_json_schema_helpers import maskbench_cases


def _norm(e):
    """An IR expression as nested tuples, rule-call source offsets dropped (the parser
    records where a name was written; lowered rules have no source)."""
    k = e[0]
    if k == "ref":
        return ("ref", e[1])
    if k == "keys":  # the IR's key trie: compared as the ordinary IR it stands for
        return _norm(key_trie.expand(e))
    if k == "seq":  # a key trie inside a sequence: its quote and trie flattened into it, as parsed
        items = []
        for x in e[1]:
            items += key_trie.expand(x)[1] if x[0] == "keys" else [x]
        return ("seq", tuple(_norm(x) for x in items))
    if k == "alt":
        return (k, tuple(_norm(x) for x in e[1]))
    if k == "rep":
        return ("rep", _norm(e[1]), e[2], e[3])
    return (k, tuple(e[1]))


def _has_length_region(e):
    k = e[0]
    if k == "len":
        return True
    if k in ("seq", "alt"):
        return any(_has_length_region(x) for x in e[1])
    return k == "rep" and _has_length_region(e[1])


class LengthRegion(Exception):
    """The lowered grammar counts a length bound on the automaton's frame, where the GBNF
    text writes the eager product: the same language (test_length_frames.py checks the
    frames against `re` + len), other rules."""


def assert_lowered_equals_parsed(schema, **kw):
    lowered = schema_to_ir(schema, **kw)
    if any(_has_length_region(body) for body in lowered.rules.values()):
        raise LengthRegion()
    parsed = gbnf.parse_gbnf(schema_to_gbnf(schema, **kw))
    assert lowered.root == parsed.root == "root"
    assert list(lowered.rules) == list(parsed.rules)
    for name, body in lowered.rules.items():
        assert _norm(body) == _norm(parsed.rules[name]), name


HAND_MADE = [
    True,
    {"type": "object", "additionalProperties": True},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}, "b": {"enum": [1, "xé\ud800", None]}},
     "required": ["a"]},
    {"type": "array", "items": {"$ref": "#"}, "maxItems": 3},  # recursion
    {"type": "string", "pattern": "^[a-z\\-^\\]]{2,40}$"},  # class escapes GBNF writes as \x2d, \x5e, \]
    {"type": "string", "format": "date-time"},
    {"type": "number", "minimum": -1.5, "exclusiveMaximum": 1e3},
    {"anyOf": [{"const": "\n\t\r\"\\\x00\x7f\u2028\ufeff😀"}, {"type": "integer", "multipleOf": 1}]},
    {"type": "string", "minLength": 3, "maxLength": 300},
]


@pytest.mark.parametrize("schema", HAND_MADE)
@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_lowered_ir_equals_parsed_gbnf_hand_made(schema, whitespace):
    assert_lowered_equals_parsed(schema, whitespace=whitespace)


@pytest.mark.parametrize("mode", [{}, {"allow_extra_properties": False, "whitespace": "flexible", "max_whitespace": 2}])
def test_lowered_ir_equals_parsed_gbnf_maskbench(mode):
    compared, regions = 0, []
    for name, schema, _tests in maskbench_cases():
        try:
            assert_lowered_equals_parsed(schema, **mode)
        except CompileError:
            continue
        except LengthRegion:
            regions.append(name)
            continue
        compared += 1
    assert compared >= 98
    assert regions == ["Github_medium---o68398.json"]  # a pattern x maxLength product


def test_schema_compiles_never_parse_gbnf(monkeypatch):
    def refuse(self):
        raise AssertionError("a JSON-schema compile parsed GBNF text")

    monkeypatch.setattr(gbnf._Parser, "parse", refuse)
    with pytest.raises(AssertionError):  # the trap is live for GBNF grammars
        gbnf.parse_gbnf('root ::= "a"')
    info = byte_info()
    c = GrammarCompiler(info)
    schema = {"type": "object", "properties": {"k": {"type": "integer", "maximum": 9}}, "required": ["k"]}
    cases = [
        (c.compile_json_schema(schema), '{"k":7}', '{"k":10}'),
        (c.compile_json_schema({}), '[1,{"a":null}]', "[1,]"),
        (c.compile_json_schema(True, whitespace="flexible", max_whitespace=1), '[ 1]', '[  1]'),
        (c.compile_json_object(), '{"a":[]}', "[]"),
        (c.compile_structural_tag([{"begin": "<f>", "schema": schema, "end": "</f>"}], ["<f>"]),
         'x <f>{"k":1}</f> y', '<f>{"k":"1"}</f>'),
    ]
    for g, good, bad in cases:
        assert walk_ids(g.matcher(), list(good.encode()) + [BYTE_EOS], info), good
        assert not walk_ids(g.matcher(), list(bad.encode()) + [BYTE_EOS], info), bad


def test_schema_to_ir_options_are_keywords():
    with pytest.raises(CompileError, match="unsupported must be 'raise' or 'warn'"):
        schema_to_ir({"type": "string"}, unsupported="ignore")
    tuple_unique = {"type": "array", "uniqueItems": True, "prefixItems": [{"type": "object"}]}
    with pytest.raises(CompileError, match="uniqueItems.*unsupported='warn'"):
        schema_to_ir(tuple_unique)
    warned = []
    g = schema_to_ir(tuple_unique, unsupported="warn", warn=warned.append)
    assert isinstance(g, ir.Grammar) and len(warned) == 1 and "uniqueItems" in warned[0]
    with pytest.raises(TypeError):
        schema_to_ir({}, strict=False)  # the old spelling is not accepted silently


def test_keys_of_the_cache_key_are_reused(monkeypatch):
    """compile_json_schema keys the schema once: the translator's memo keys come from the
    map its cache key filled (no second walk), and the rules are the same either way."""
    import itertools

    from furca.constrain import compiler as gc_module
    from furca.constrain.json_schema import compiler as jc

    for _name, schema, _tests in itertools.islice(maskbench_cases(), 40):
        if not isinstance(schema, dict):
            continue
        try:
            fresh = schema_to_ir(schema).rules
        except CompileError:
            continue
        keys = {None: []}
        jc.schema_key(schema, keys)
        assert schema_to_ir(schema, keys=keys).rules == fresh

    compiler = GrammarCompiler(byte_info())  # (its construction compiles the lexemes' grammar)
    handed = []
    real = gc_module.schema_to_ir
    monkeypatch.setattr(gc_module, "schema_to_ir", lambda s, **kw: handed.append((s, kw["keys"])) or real(s, **kw))
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {}}}}
    compiler.compile_json_schema(schema)
    (s, keys), = handed
    assert s is schema and id(schema) in keys and id(schema["properties"]["b"]) in keys
