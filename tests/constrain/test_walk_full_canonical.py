"""Inside a counter or a length region, the compiled walks take a trie node's state at its
canonical counts (automaton.full_canonical) when the node has at most room[s] bytes
below it, so a long token is walked through one count's states, not one per count.
Every mask is compared with brute force (each token stepped alone) at every count of
strings whose maximum is the longest token's length, one less and one more (where the
room's bound is tight), with long runs of one- and two-byte characters, escapes and
tokens that close the string; and the first mask of a string no longer makes a state
per count."""
from __future__ import annotations

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, TokenizerInfo, _walk

from .conftest import BYTE_EOS, allowed_set, check_mask, walk_checking_masks

LONG = (
    [("a" * k) for k in range(17, 41)]  # the longest token: 40 characters
    + [(" " * k) for k in (20, 39, 40)]
    + [("é" * k) for k in (9, 19, 20)]  # 2 bytes a character
    + [("\\n" * k) for k in (9, 19, 20)]  # an escape: one character of two bytes
    + [("b" * k) + '"' for k in (18, 38, 39, 40)]  # the string's end inside the token
    + [("c" * k) + '",' for k in (19, 39)]
)

needs_walks = pytest.mark.skipif(_walk.get_walk() is None, reason="the compiled walks (numba)")


def long_info(long=LONG):
    toks = [bytes([i]) for i in range(256)] + [None, None] + [e.encode() for e in long]
    return TokenizerInfo(toks, [BYTE_EOS], vocab_size=258 + len(long), long_tokens=len(long))


SCHEMAS = [
    {"type": "string", "maxLength": 39},
    {"type": "string", "maxLength": 40},
    {"type": "string", "maxLength": 41},
    {"type": "string", "minLength": 25, "maxLength": 40},
    {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 3},
    {"type": "string", "pattern": "^[a é]*$", "maxLength": 41},  # a counter of characters
    {"type": "string", "pattern": "^[a-c é]+$", "minLength": 2, "maxLength": 40},
    {"type": "string", "pattern": "^(ab|a|é )*$", "maxLength": 40},  # length regions
    {"type": "string", "pattern": "^[a é]+x?$", "minLength": 3, "maxLength": 40},
]


@needs_walks
@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: str(s)[:48])
def test_every_count_equals_brute_force(schema):
    info = long_info()
    g = GrammarCompiler(info).compile_json_schema(schema)
    for unit in ("a", "é", " "):
        m = g.matcher()
        assert m.accept_string('["' if schema.get("type") == "array" else '"')
        for _ in range(42):  # every count up to past the bound
            check_mask(m, info)
            if not m.accept_string(unit):
                break
    for seed in range(4):
        walk_checking_masks(g.matcher(), info, random.Random(seed), 30)


def _counts(a):
    """The counts of the counter frames on the automaton's stacks."""
    return {k for ret, _p, k in a.stacks.frames if k and ret in a.nfa.counter}


@needs_walks
def test_first_mask_walks_one_count():
    """The first mask inside a maxLength 40 string walks the 40-character tokens through
    the states of one count: without the canonical states every count from 2 to 41 became
    a state (and a stack). (A token that holds the whole room and then closes the string,
    41 bytes here, still walks one count per byte: its bytes exceed the room.)"""
    long = [("a" * k) for k in range(17, 41)] + [("é" * k) for k in (9, 20)] + [("b" * k) + '"' for k in (18, 30)]
    info = long_info(long)
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 40})
    m = g.matcher()
    assert m.accept_string('"')
    before = _counts(g.automaton)
    bits = allowed_set(m, info)
    assert bits[258 + long.index("a" * 40)] and bits[258 + long.index("b" * 30 + '"')]
    made = _counts(g.automaton) - before
    assert len(made) <= 3, sorted(made)
    assert m.accept_string("a" * 38)
    bits = allowed_set(m, info)  # 38 characters: room for 2 more
    assert not bits[258 + long.index("a" * 17)] and bits[ord("a")]


@needs_walks
def test_rows_in_part_past_the_room(monkeypatch):
    """Past a state's room (a maxLength 20 string against 40-character tokens) the walk
    meets one state per count along each long token and reads one byte of each: those
    states get that byte's successor only (trie_walks.resume), and become whole rows
    when a later mask or step needs them. Masks equal brute force at every count. (The
    string is the whole document, whose states are walked as they are once the root's
    states do not take the bounded strings' tables: contexts.ContextSplit.contexts.)"""
    from furca.constrain import contexts

    monkeypatch.setattr(contexts.ContextSplit, "contexts", lambda self, s: None)
    info = long_info()
    g = GrammarCompiler(info).compile_json_schema({"type": "string", "maxLength": 20})
    a = g.automaton
    m = g.matcher()
    assert m.accept_string('"')
    check_mask(m, info)
    n = a.num_states
    partial = np.flatnonzero(a.walkable[:n] & ~a.expanded[:n])
    assert len(partial) >= 10
    s = int(partial[0])
    assert (a.trans[s] < 0).sum() > 200  # one or a few bytes known
    for _ in range(22):
        if not m.accept_string("a"):
            break
        check_mask(m, info)
    for s in range(1, a.num_states):
        if a.walkable[s] and not a.expanded[s]:  # every byte known is the byte's step
            for b in np.flatnonzero(a.trans[s] >= 0):
                assert int(a.trans[s, b]) == a.step(s, bytes([int(b)]))
