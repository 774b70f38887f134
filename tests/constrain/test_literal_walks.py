"""Configurations on literal bytes walked without automaton states
(key_masks.KeyTrieMasks._literal_walks): the tokens along the literal found in the token
trie, and the state the literal reaches continuing the walk below that node. For
states sitting on literals (a declared name's rest at a key position, a const or enum
value, an enum of whole texts whose end, accepting, follows the literal), the words and the
return nodes must be those of the state's own recording walk, on the real Llama-3.1 trie;
dropping the continuation walk, the bits along the literal, or the returns at an accepting
end each fails it."""
import numpy as np
import pytest

from furca.constrain.trie_walks import walk_recording

from .conftest import needs_compiled_walks

pytestmark = needs_compiled_walks  # recording walks

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "nickname": {"const": 'bo"b'}, "kind": {"enum": ["alpha", "alpine", "beta"]},
    "n": {"type": "integer"}}}
ROOT_ENUM = {"type": "object", "properties": {"k": {"type": "string"}},
             "anyOf": [{"required": ["k"]}, {"enum": [{"k": "v"}, {"k": "w", "x": 1}]}]}
# (schema, prefix) leaving the matcher on literal configurations: inside a key, a const or
# enum value; in ROOT_ENUM the whole text's end (accepting) follows a literal
CASES = [(SCHEMA, p) for p in ['{"', '{"n', '{"nick', '{"nickname":"', '{"nickname":"bo', '{"kind":"', '{"kind":"alp',
                               '{"kind":"b']] + [(ROOT_ENUM, '{"k":"'), (ROOT_ENUM, '{"k":"w","x":1')]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_literal_walks_equal_the_states_own_walk(llama, case):
    info, compiler, _tok = llama
    schema, prefix = CASES[case]
    g = compiler.compile_json_schema(schema)
    m = g.matcher()
    assert m.accept_string(prefix)
    a, keys = g.automaton, g.masks._keys
    state = m._t[0]  # the matcher's current state (its history node)
    hit = a.abstract(state)
    ab = hit[0] if hit is not None else state
    configs = a.configs[ab]
    literal = [c for c in configs if len(a.nfa.edges[c[0]]) == 1 and a.nfa.edges[c[0]][0][0] == a.nfa.edges[c[0]][0][1]]
    assert literal, "no literal configuration here"
    trie = info.trie
    got = np.zeros(info.num_words, dtype=np.uint32)
    found, others = keys._literal_walks(literal, trie, got)
    assert others == []
    roots = np.unique(np.concatenate([x for x in found if len(x)] or [np.zeros(0, np.int32)]))
    want = np.zeros(info.num_words, dtype=np.uint32)
    want_roots = walk_recording(a, a.intern(literal, False), trie, want)
    assert np.array_equal(got, want)
    assert np.array_equal(roots, np.unique(want_roots))
