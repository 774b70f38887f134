"""SliceProof's key trie parts (`KeyTrieParts.trie_units`: key_trie.py marks its trie nodes): a trie
node's part requires key-rest's unit and its own (itself and key-other's start), not its
children's, and the verdict is spread over the whole trie. The verdicts and parts equal
those of the general path, also where key-rest or key-other fails (a bounded rest, a
rest that cannot start), and where the trie comes from a JSON schema (where the first
proof holds and settles every node of its trie)."""

import random

import pytest

from furca.constrain import GrammarCompiler, ir, key_trie
from furca.constrain.slice_proof import SliceProof

from .conftest import byte_info, walk_checking_masks

_PLAIN = ((0x20, 0x21), (0x23, 0x7F), (0x80, 0xFF))
RESTS = {
    "any": ir.seq([("rep", ("byte", _PLAIN), 0, None), ir.literal('"')]),
    "bounded": ir.seq([("rep", ("byte", _PLAIN), 0, 5), ir.literal('"')]),
    "quote": ir.literal('"'),  # no slice character after the trie
}
OTHERS = {
    "wide": ir.seq([("byte", ((0x5C, 0x5C), (0x80, 0xFF))), ("ref", "key-rest", 0)]),
    "ends": ir.seq([("byte", ((0x5C, 0x5C), (0x80, 0xFF))), ir.literal('"')]),
    "own": ir.seq([("byte", ((0x5C, 0x5C), (0x80, 0xFF))), ("rep", ("byte", _PLAIN), 0, None), ir.literal('"')]),
}
NAMES = [["a"], ["", "a", "ab"], ["ab", "abc", "b", "a b"], ["apiVersion", "kind", "metadata", "spec"],
         ["z" * 30, "~", " ", "x{", "x}"], ["k%02d" % i for i in range(40)]]


def _grammar(names, rest, other):
    return ir.Grammar({"root": ir.seq([key_trie.keys(names, "key-rest", "key-other"), ir.literal(":")]),
                       "key-rest": RESTS[rest], "key-other": OTHERS[other]})


def _general(a):
    """A SliceProof that knows no key trie (the path before trie_units)."""
    p = SliceProof(a)
    p.tries.marks = {}
    return p


def _same_verdicts(g, info, held):
    a = g.automaton
    marked = key_trie.trie_nodes(a.nfa)
    assert marked
    for sl in info.slices():
        fast, slow = SliceProof(a), _general(a)
        for n in range(len(a.nfa.edges)):
            assert fast.free_unbounded([(n, None)], sl) == slow.free_unbounded([(n, None)], sl), (n, sl.name)
        common = fast._parts[sl.name].keys() & slow._parts[sl.name].keys()
        assert {k: fast._parts[sl.name][k] for k in common} == {k: slow._parts[sl.name][k] for k in common}
        # a first proof that holds at a trie node settles every node of its trie
        first = SliceProof(a)
        n = min(marked)
        if first.free_unbounded([(n, None)], sl):
            assert all(first._parts[sl.name].get(((m, None),)) for m, mark in marked.items() if mark == marked[n])
            held[0] += 1


@pytest.mark.parametrize("rest", sorted(RESTS))
@pytest.mark.parametrize("other", sorted(OTHERS))
def test_trie_verdicts_equal_the_general_path(rest, other):
    info = byte_info(['"', '":', "ab", "abc", "a", "b", "ca", "\xe6", "zzzzzzzz"])
    held = [0]
    for names in NAMES:
        g = GrammarCompiler(info)._compile(_grammar(names, rest, other), ("grammar",))
        _same_verdicts(g, info, held)
    assert held[0] or rest != "any" or other == "ends"


def test_json_schema_tries_and_masks(llama):
    info, compiler, _tok = llama
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in NAMES[3] + NAMES[5]},
              "additionalProperties": {"type": "string", "maxLength": 4}}
    g = compiler.compile_json_schema(schema)
    held = [0]
    _same_verdicts(g, info, held)
    assert held[0]
    small = byte_info(['"', '":', "k0", "k01", "ki", '":"', "\xe6"])
    g = GrammarCompiler(small).compile_json_schema(schema)
    for seed in range(4):
        m = g.matcher()
        assert m.accept_token(ord("{"))
        walk_checking_masks(m, small, random.Random(seed), 20)
