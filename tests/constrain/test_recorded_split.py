"""An abstract state's recording walk from its lexeme parts (contexts.ContextSplit.recorded_split).

The language of a set of configurations is the union of theirs, so a state with
configurations inside a lasting rule (a lexeme of the closed layout) under a frame of the
grammar's own takes that part's abstract walk (shared by every grammar) continued below
its return nodes by a recording walk from the state after the return, plus a walk of the
rest. The masks must be those of the state's whole walk, along real Llama-3.1 instances:
keys that are none of an object's names (the key trie's "any key" state), wide
characters and escapes in them (canonical JSON, as json_schema/keys.py requires), values of several lexemes, anyOf branches after which the rule ends at once, and a
grammar whose layout is not closed (flexible whitespace: nothing to split)."""
import numpy as np
import pytest

from furca.constrain import GrammarCompiler
from furca.constrain import lexeme_masks
from furca.constrain import contexts
from furca.constrain import trie_walks

from .conftest import needs_compiled_walks
from .test_lexeme_masks import _walk as _masks

pytestmark = needs_compiled_walks  # the split's parts are recording walks

CASES = [
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
     ['{"name":"Ada","age":36,"nickname":"the \\"first\\"","xéy\\"z\\\\":[1,{"k":null}]}',
      '{"naming":true,"ag":-2.5,"":""}']),
    ({"type": "array", "items": {"type": "object", "required": ["id"],
                                 "properties": {"id": {"type": "integer"}, "tags": {"type": "array",
                                                                                    "items": {"type": "string"}}},
                                 "additionalProperties": {"type": "string"}}},
     ['[{"id":1,"tags":["a","b c"],"note":"free text here","idea":"x"},{"id":2}]']),
    ({"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "number"},
                                                      {"type": "string", "maxLength": 3}]},
                                       "w": {"type": ["string", "null"]}},
      "required": ["v"]},
     ['{"v":"abcdef","w":null,"z":{"deep":["s",2]}}', '{"v":12.5e-3,"w":"ok"}', '{"v":"ab"}']),
    # inside "a" the two branches' states differ: a plain string (a lexeme, under the first
    # branch's member frame) and a bounded one (the grammar's own, walked as the rest); only
    # the second branch may close the object after it (`"}`: the rest's own tokens and returns)
    ({"type": "object", "properties": {"v": {"anyOf": [
        {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
         "required": ["a", "b"], "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}, "c": {"type": "boolean"}},
         "required": ["a"], "additionalProperties": False}]}}},
     ['{"v":{"a":"abc"}}', '{"v":{"a":"abcdefg","b":3}}', '{"v":{"a":"xy","c":true}}']),
]


@pytest.fixture
def split_calls(monkeypatch):
    """Counts the splits made (not None) and drops the masks shared across grammars, so
    that the lexeme parts are computed here."""
    made = []
    real = contexts.ContextSplit.recorded_split

    def counted(self, s, compute):
        out = real(self, s, compute)
        if out is not None:
            made.append(s)
        return out

    monkeypatch.setattr(contexts.ContextSplit, "recorded_split", counted)
    saved = dict(lexeme_masks._LEXEME_MASKS)
    lexeme_masks._LEXEME_MASKS.clear()
    yield made
    lexeme_masks._LEXEME_MASKS.clear()
    lexeme_masks._LEXEME_MASKS.update(saved)


@pytest.mark.parametrize("rec_start", [trie_walks.REC_START, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_split_masks_equal_the_whole_walk(llama, split_calls, monkeypatch, case, rec_start):
    info, _, tok = llama
    monkeypatch.setattr(trie_walks, "REC_START", rec_start)  # 2: the recordings grow at once
    schema, texts = CASES[case]
    split = GrammarCompiler(info).compile_json_schema(schema)
    got = [_masks(split, tok, t) for t in texts]
    assert split_calls, "no state was split"
    monkeypatch.setattr(contexts.ContextSplit, "recorded_split", lambda self, s, compute: None)
    whole = GrammarCompiler(info).compile_json_schema(schema)
    for text, (masks, end) in zip(texts, got):
        masks2, end2 = _masks(whole, tok, text)
        assert end == end2
        assert len(masks) == len(masks2)
        for i, (x, y) in enumerate(zip(masks, masks2)):
            assert np.array_equal(x, y), (text, i, int(np.unpackbits((x ^ y).view(np.uint8)).sum()))


def test_open_layouts_do_not_split(llama, split_calls):
    info, _, tok = llama
    schema, texts = CASES[0]
    g = GrammarCompiler(info).compile_json_schema(schema, whitespace="flexible")
    assert g.masks._a.nfa.layout is None or not g.masks._a.nfa.layout.closed
    _masks(g, tok, texts[0].replace(":", ": "))
    assert not split_calls
