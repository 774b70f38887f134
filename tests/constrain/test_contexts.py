"""States without one context (contexts.ContextSplit.contexts): a state whose configurations
share no frame had its mask walked whole. Two kinds now take their abstract state's mask:
the same lexeme reached along several parses (an object that `dependencies` splits into
alternatives reaches its string values from two call sites), continued from each call's
return; and a state at the root with no frame at all (a bounded string as the whole
document), whose mask is the same state's at the context frame (the bounded strings'
tables, or a shared lexeme mask). The masks must equal brute force along random walks,
and the path must be taken."""
from __future__ import annotations

import random

import pytest

from furca.constrain import GrammarCompiler, contexts

from .conftest import accept_bytes, byte_info, needs_compiled_walks, walk_checking_masks

pytestmark = needs_compiled_walks  # abstract states' masks are recording walks

EXTRA = ["ab", "a b", 'ab"', '",', '","', '"}', '":"', "name", '"name', "xyz" * 5, "\\n", "é", '"x', '"t']

DEPENDENT = {"type": "object", "additionalProperties": False, "required": ["name"],
             "dependencies": {"topic": ["tags"]},
             "properties": {"topic": {"type": "string"}, "name": {"type": "string"},
                            "tags": {"type": "array", "items": {"type": "string"}}}}
ROOT_BOUNDED = {"type": "string", "minLength": 3, "maxLength": 12}


@pytest.fixture
def taken(monkeypatch):
    """The (state, contexts) each contexts() call returned, while the test runs."""
    seen = []
    real = contexts.ContextSplit.contexts

    def spy(self, s):
        got = real(self, s)
        seen.append(got)
        return got

    monkeypatch.setattr(contexts.ContextSplit, "contexts", spy)
    return seen


@pytest.mark.parametrize("schema,prefix", [(DEPENDENT, '{"name":"'), (DEPENDENT, '{"name":"a b'),
                                           (ROOT_BOUNDED, '"'), (ROOT_BOUNDED, '"ab')])
def test_masks_without_one_context_equal_brute_force(taken, schema, prefix):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(schema)
    rng = random.Random(len(prefix))
    for _ in range(4):
        walk_checking_masks(accept_bytes(g, prefix), info, rng, 10)
    assert any(x is not None for x in taken), "no state took its mask from several contexts or the root"


def test_the_contexts_found(taken):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(DEPENDENT)
    a = g.automaton
    m = accept_bytes(g, '{"name":"')
    s = m._t[0]
    assert a.abstract(s) is None  # two parses: the configurations share no frame
    ab, conts = g.masks.split.contexts(s)
    assert len(conts) == 2 and all(conts) and a.abstract(s) is None
    root = GrammarCompiler(info).compile_json_schema(ROOT_BOUNDED)
    s = accept_bytes(root, '"')._t[0]
    ab, conts = root.masks.split.contexts(s)
    assert conts == [0] and root.masks.bounded.locate(ab, info.trie, False) is not None
