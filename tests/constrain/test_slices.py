"""Slice bounds (slices.py): the proof that a configuration survives every string of
slice characters, checked against a search over automaton states, and the masks it
shortcuts checked against brute force (every token stepped through the automaton)."""

import json
import random

import pytest

from furca.constrain import GrammarCompiler
from furca.constrain.slice_proof import _greatest_fixpoint

from .conftest import allowed_set, byte_info, walk_checking_masks

NAMES = ["alpha", "alpine", "alp", "beta", "b", "bet", "gamma", "日本", "日", "x\"y", "a\\b", "zeta", "zz", "z"]
SCHEMA = {
    "type": "object",
    "properties": {n: {"type": "string", "maxLength": 5} for n in NAMES},
    "additionalProperties": {"type": "integer"},
}
EXTRA = ['"', '":', '",', '"al', "pha", 'pha":', "日本", '本"', "zz", "zeta", '"}', "abc", "\\\\", '\\"', "\xe6"]


def reaches_death(bounds, s, sl, limit=3000):
    """Whether some string of slice characters leads from state s to the dead state,
    searched over automaton states (up to `limit` of them) with the slice bounds' step."""
    seen, todo = {s}, [s]
    while todo and len(seen) < limit:
        dies, succ = bounds._step(todo.pop(), sl)
        if dies:
            return True
        for y in succ:
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return False


def test_greatest_fixpoint_keeps_cycles_and_drops_what_cannot_hold():
    needs = {
        "a": [["b", "c"]],  # a needs b or c
        "b": [["a"]],  # a and b hold each other up
        "c": [[]],  # a requirement without options
        "d": [["a"], ["e"]],  # needs a and e; e was never explored
        "f": [["c"]],
    }
    assert _greatest_fixpoint(needs) == {"a": True, "b": True, "c": False, "d": False, "f": False}


def _walked_compiled():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    text = json.dumps({"alpha": "x", "日本": "ab", "z": "q", "alpx": 1, "日x": 2, "zzz": 3}, ensure_ascii=False,
                      separators=(",", ":"))
    m = g.matcher()
    for b in text.encode():
        allowed_set(m, info)
        assert m.accept_token(b), m.error
    return info, g


def test_proof_agrees_with_the_state_search():
    info, g = _walked_compiled()
    a, bounds = g.automaton, g.masks.slices
    sl = info.slices()[0]
    proven = refuted = 0
    for configs in list(a.configs):
        for c in configs:
            if not bounds.proof.unbounded((c,), sl):
                refuted += 1
                continue
            proven += 1
            assert not reaches_death(bounds, a.intern([c], False), sl), c
    assert proven and refuted
    # the key-exclusion trie: its root (an edge per first letter, with key-other's start
    # for the wide characters) is proven without a state search
    roots = [u for u, ok in bounds.proof._proven[sl.name].items() if ok and len(u) > 1
             and any(len(a.nfa.edges[n]) >= 8 for n, _st in u)]
    assert roots


@pytest.mark.parametrize("seed", range(3))
def test_masks_at_object_keys_equal_brute_force(seed):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    rng = random.Random(seed)
    walk_checking_masks(g.matcher(), info, rng, 80)


def test_stack_free_units_are_the_stack_independent_closures():
    # closure_unit(n, None) assembles a node's unit from the units of the rules it calls;
    # it must be exactly the nodes of the automaton's stack-independent closure, for every
    # node (calls of nullable rules, counters, tail calls, key tries); the byte classes
    # read off non-overlapping edges are the automaton's template
    gbnf = r'''root ::= "[" (item ("," item)*)? "]" | big
item ::= opt "x" | "\"" [^"\\]* "\"" | inner
opt ::= "a"?
inner ::= "<" [a-z]{0,40} ">" item?
big ::= "{" [0-9]{2,30} "}"
'''
    info = byte_info(EXTRA)
    for g in (GrammarCompiler(info).compile_json_schema(SCHEMA), GrammarCompiler(info).compile_grammar(gbnf)):
        a, proof = g.automaton, g.masks.slices.proof
        for n in range(len(a.nfa.edges)):
            ref = tuple(sorted({(m, None) for m, _rel in a.closures.relative(n)[0]}))
            assert proof.closure_unit(n, None) == ref, n
            assert proof._classes(n) == a.template(n), n
