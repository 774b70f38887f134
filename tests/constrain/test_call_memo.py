"""The tokens below a trie node from a lasting call's abstract state, kept per (trie,
abstract state, node) and shared by every caller (call_memo.CallMemo), in the
recording walks of key tries: the "any key" state's continuation (`":` then any JSON
value, then the object's own `,` / `}`) and the declared names' literal walks.

The masks must equal those computed without it, along real Llama-3.1 instances, for
objects with free members in several places (the memo's sharing), a free member's value
in tail position (the state after the value's return is accepting: its return nodes are
the walk's own), values of several lexemes and nested values; and build_nfa must keep a
frame for a call from the grammar's own rules into a lasting rule, except where the
matcher watches keys or items (member_order="any", uniqueItems)."""
import numpy as np
import pytest

from furca.constrain import GrammarCompiler
from furca.constrain import masks as masks_mod

from .test_lexeme_masks import _walk as _masks

CASES = [
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
     ['{"name":"Ada","age":36,"nickname":"the \\"first\\"","x":"","y":[1,{"k":null}],"z":{}}']),
    # free members in three objects of two shapes, nested: one "any key" continuation per
    # object, one memo for the JSON value after `":` shared by all of them
    ({"type": "object", "properties": {
        "a": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "b": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "c": {"type": "object", "properties": {"tag": {"type": "string"}, "n": {"type": "number"}}}}},
     ['{"a":{"id":1,"x":"","y":{"z":[true]}},"b":{"id":2,"w":3.5},"c":{"tag":"t","n":-1e3,"q":null}}',
      '{"a":{"k":[]},"c":{"u":"","v":{}}}']),
    # free members whose values have a schema of their own (not a lasting rule)
    ({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     ['{"id":7,"note":"free text","":"","x\\"y":"z"}']),
    # flexible whitespace: the declared names' literal walks (no split: the layout is open)
    ({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}},
     ['{ "name": "Ada", "tags": [ "a", "b" ], "x": { "y": 1 } }', '{"name":"","extra":[]}'], {"whitespace": "flexible"}),
]


@pytest.fixture
def fresh_lexemes():
    """Drops the masks shared across grammars, so that every walk is made here."""
    saved = dict(masks_mod._LEXEME_MASKS)
    masks_mod._LEXEME_MASKS.clear()
    yield
    masks_mod._LEXEME_MASKS.clear()
    masks_mod._LEXEME_MASKS.update(saved)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_masks_equal_those_without_the_memo(llama, fresh_lexemes, monkeypatch, case):
    info, _, tok = llama
    schema, texts, *kw = CASES[case]
    kw = kw[0] if kw else {}
    applied = []
    real = masks_mod.TokenMasks._call_entry

    def counted(self, trie, stack, i, words, start):
        out = real(self, trie, stack, i, words, start)
        if out[0] >= 0:
            applied.append(len(self._calls))
        return out

    monkeypatch.setattr(masks_mod.TokenMasks, "_call_entry", counted)
    g = GrammarCompiler(info).compile_json_schema(schema, **kw)
    got = [_masks(g, tok, t) for t in texts]
    assert applied, "the memo was never used"
    if case == 1:  # shared: applied more often than computed
        assert len(applied) > len(g.masks._calls) > 0, (len(applied), len(g.masks._calls))
    monkeypatch.setattr(masks_mod.TokenMasks, "_call_entry", lambda self, *args: (-1, None))
    masks_mod._LEXEME_MASKS.clear()
    plain = GrammarCompiler(info).compile_json_schema(schema, **kw)
    for text, (masks, end) in zip(texts, got):
        masks2, end2 = _masks(plain, tok, text)
        assert end == end2 and len(masks) == len(masks2)
        for i, (x, y) in enumerate(zip(masks, masks2)):
            assert np.array_equal(x, y), (text, i, np.flatnonzero(np.unpackbits((x ^ y).view(np.uint8),
                                                                                bitorder="little"))[:5])


def _own_calls_into_lasting(nfa):
    size = nfa.layout.size
    return [(c, r) for c, (callee, r) in nfa.call.items() if callee < size <= c]


def test_calls_into_lasting_rules_keep_their_frame(llama):
    info, compiler, _ = llama
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}}  # free members: any value, in tail position
    nfa = compiler.compile_json_schema(schema).automaton.nfa
    calls = _own_calls_into_lasting(nfa)
    assert calls and not any(r in nfa.is_tail for _c, r in calls)
    # where a matcher watches the keys, the stacks stay as the tail calls leave them
    nfa = compiler.compile_json_schema(schema, member_order="any").automaton.nfa
    calls = _own_calls_into_lasting(nfa)
    assert any(r in nfa.is_tail for _c, r in calls)


def test_eviction_drops_the_memo_and_masks_stay_the_same(llama, fresh_lexemes):
    # the memo's bytes are counted in the store's budget and dropped with the abstract
    # masks (TokenMasks._evict); the masks computed again after it are the same
    from furca.constrain.stored_masks import _size

    info, _, tok = llama
    schema, texts = CASES[1][:2]
    g = GrammarCompiler(info).compile_json_schema(schema)
    first = [_masks(g, tok, t) for t in texts]
    assert len(g.masks._calls)
    g.masks._evict()
    assert not len(g.masks._calls)
    assert g.masks.mask_bytes == sum(_size(m) for m in g.masks._store.values())
    again = [_masks(g, tok, t) for t in texts]
    for (masks, end), (masks2, end2) in zip(first, again):
        assert end == end2 and all(np.array_equal(x, y) for x, y in zip(masks, masks2))
