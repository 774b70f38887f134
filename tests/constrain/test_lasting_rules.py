"""Lasting rules (ir.Grammar.lasting): the JSON schema front end's any-JSON-value rule and
the key tries' key-esc / key-rest / key-other have one body object per process; lower
keeps their IR, prepare their facts, and build_nfa lays them out at node 0 once and
copies that layout into every later grammar that has them (nfa._Layout). The copied
grammars must be the grammars built from scratch: same masks, same answers."""
import random

import numpy as np
import pytest

from furca.constrain import ir
from furca.constrain.automaton import LazyAutomaton
from furca.constrain.compiled import CompiledGrammar
from furca.constrain.json_schema import schema_to_ir
from furca.constrain.nfa import build_nfa
from furca.constrain.prepare import prepare

from .conftest import BYTE_EOS, byte_info

SCHEMAS = [
    True,
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "object",
                                                                        "properties": {"k": {"enum": [1, "z"]}}}}}},
    {"type": "array", "items": {}},
]
TEXTS = [
    '{"a":"q","b":3}', '{"a":"q","zz":[1,{"k":null}],"b":-2}', '{"b":1}', '{"a":"\\u00e9\\n","c":{"d":[true,false]}}',
    '{"x":[{"k":1,"m":"v"},{"k":"z"}],"y":{}}', '{"x":[{"k":2}]}', '[1,"a",{"b":[]},null]', '["\\x"]', '{"a":"é"}',
    '{"a":"q","a\\u0000":1}', '{"kk":{"a":1e5}}', '{"a":1}',
]


def _nfa(schema, whitespace, keep_lasting):
    g = schema_to_ir(schema, whitespace=whitespace)
    if not keep_lasting:
        g = ir.Grammar(dict(g.rules), g.root)  # no lasting rules: every rule built here, in order
    return build_nfa(prepare(g))


def _masks_along(nfa, info, text):
    """The allowed-token sets along text's bytes, then whether it ends there (None past a
    rejected byte)."""
    g = CompiledGrammar(LazyAutomaton(nfa, info), "json_schema")
    m = g.matcher()
    out = []
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for b in text.encode():
        m.fill_bitmask(bm)
        out.append(bm.copy())
        if not m.accept_token(b):
            out.append(None)
            return out
    m.fill_bitmask(bm)
    out.append(bm.copy())
    out.append(m.accept_token(BYTE_EOS))
    return out


@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_copied_layouts_give_the_grammars_built_from_scratch(whitespace):
    info = byte_info(["ab", "\"}", "{\"", "12", " \"", "\":"])
    for schema in SCHEMAS:
        copied, scratch = _nfa(schema, whitespace, True), _nfa(schema, whitespace, False)
        assert len(copied.edges) == len(scratch.edges)
        for text in TEXTS:
            text2 = text if whitespace == "compact" else text.replace(",", ", ")
            a, b = _masks_along(copied, info, text2), _masks_along(scratch, info, text2)
            assert len(a) == len(b), (schema, text2)
            for x, y in zip(a, b):
                assert (x is None and y is None) or (isinstance(x, bool) and x == y) or np.array_equal(x, y), \
                    (schema, text2)


def test_the_layout_is_built_once_and_copied():
    schemas = SCHEMAS[1:3]
    first, second = (_nfa(s, "compact", True) for s in schemas)
    shared = ("json-value", "key-esc", "key-rest", "key-other")
    for name in shared:  # the same block of nodes, wherever the layouts place it
        assert first.layout.canon(first.rule_start[name])[1] == 0
        assert first.layout.canon(first.rule_start[name]) == second.layout.canon(second.rule_start[name])
    lasting = [n for n in first.rule_start if first.layout.canon(first.rule_start[n]) is not None]
    assert set(shared) | {"a", "b"} == set(lasting)  # the plain string and integer too
    top = first.layout.size
    assert all(v >= top for n, v in first.rule_start.items() if n not in lasting)  # laid out first
    assert first.layout.closed
    # the same schema again: its lasting nodes are the first's edge tuples themselves
    again = _nfa(schemas[0], "compact", True)
    assert again.layout is first.layout
    assert all(again.edges[i] is first.edges[i] for i in range(top) if first.edges[i])
    # a property named otherwise with the same lexeme takes the same block
    renamed = _nfa({"type": "object", "properties": {"zz": {"type": "string"}, "b": {"type": "integer"}},
                    "required": ["zz"]}, "compact", True)
    assert renamed.layout is first.layout and renamed.rule_start["zz"] == first.rule_start["a"]
    # a grammar without lasting rules is built as before, from node 0
    plain = _nfa({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}},
                  "additionalProperties": False}, "compact", True)
    assert plain.layout is None and plain.rule_start["root"] == 0
    # flexible whitespace: any value calls `ws` (not lasting): the layout is not closed
    assert not _nfa(True, "flexible", True).layout.closed


def test_the_kept_layouts_are_bounded_by_their_nodes(monkeypatch):
    # one layout per combination of lasting bodies (the formats make many): kept until
    # MAX_LAYOUTS or MAX_LAYOUT_NODES, then built for each grammar, which stays the same
    from furca.constrain import nfa as nfa_mod

    monkeypatch.setattr(nfa_mod, "_LAYOUTS", {})
    monkeypatch.setattr(nfa_mod, "_LAYOUT_NODES", [0])
    first = _nfa({"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}}, "compact", True)
    monkeypatch.setattr(nfa_mod, "MAX_LAYOUT_NODES", first.layout.size + 10)
    assert _nfa({"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}},
                "compact", True).layout is first.layout  # kept
    other = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}
    a, b = _nfa(other, "compact", True), _nfa(other, "compact", True)
    assert a.layout is not b.layout and list(nfa_mod._LAYOUTS.values()) == [first.layout]  # over the bound
    assert nfa_mod._LAYOUT_NODES[0] == first.layout.size
    assert a.edges == b.edges and a.layout.closed and b.layout.closed


def test_lasting_bodies_are_shared_objects_across_compiles():
    a = schema_to_ir(SCHEMAS[1])
    b = schema_to_ir(SCHEMAS[2])
    keys = {"json-value", "key-esc", "key-rest", "key-other"}
    assert a.lasting == keys | {"a", "b"} and b.lasting == keys  # b: the enum is not a lexeme
    for name in keys:
        assert a.rules[name] is b.rules[name]
    c = schema_to_ir({"type": "array", "items": {"type": "string"}})  # another name, the same lexeme
    assert c.lasting == {"item"} and c.rules["item"] is a.rules["a"]
    # a property named like the value rule keeps its name and its own (not lasting) rule; any
    # value is then json-value-2, lasting too (another body: it recurses through its own name)
    c = schema_to_ir({"type": "object", "properties": {"json-value": {"type": "string", "maxLength": 2}}})
    assert "json-value" not in c.lasting and "json-value-2" in c.lasting
    assert c.rules["json-value"] is not a.rules["json-value"]
    d = schema_to_ir({"type": "object", "properties": {"json-value": {"type": "integer"}}})
    assert d.rules["json-value-2"] is c.rules["json-value-2"]


def test_random_texts_agree_between_copied_and_scratch():
    # byte-level random walks inside any JSON value: the copied layout answers as the scratch one
    info = byte_info()
    rng = random.Random(7)
    copied, scratch = _nfa(True, "compact", True), _nfa(True, "compact", False)
    gc, gs = (CompiledGrammar(LazyAutomaton(n, info), "json_schema") for n in (copied, scratch))
    for _ in range(30):
        mc, ms = gc.matcher(), gs.matcher()
        bm1 = np.zeros((1, info.num_words), dtype=np.int32)
        bm2 = bm1.copy()
        for _step in range(40):
            mc.fill_bitmask(bm1)
            ms.fill_bitmask(bm2)
            assert np.array_equal(bm1, bm2)
            bits = np.flatnonzero(np.unpackbits(bm1.view(np.uint8), bitorder="little")[:256])
            if not len(bits):
                break
            b = int(rng.choice(bits))
            assert mc.accept_token(b) and ms.accept_token(b)
