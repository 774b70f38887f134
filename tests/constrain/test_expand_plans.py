"""Successors from relative closures (rows.from_plan, LazyAutomaton._step_byte): a
target's closure is its stack-independent part (Closures.relative) pushed on the stack
after the byte, the full closure only where the target's rule may end; in a length
region the stack after the byte is Closures.byte_stack's (-1 past the maximum: no
successor) and only Closures.live's configurations are kept. Checked on every state a
breadth-first search reaches in small grammars (length regions whose counts reach their
maximum, alternatives of several configurations, recursion): each expanded row and each
row-less byte step equals the closure of the byte's targets computed from the NFA; the
rows both by rows.py and by the kernel (core_rows.py)."""

import pytest

from furca.constrain import GrammarCompiler

from .conftest import byte_info
from .test_length_frames import frame_grammar
from .test_rows import check_rows_by, reference_row, rows_by  # noqa: F401 - rows_by: a fixture

PATTERNS = [  # (ECMA pattern, min, max): alternatives that overlap (several configurations)
    ("^(?:\\S+\\s+){0,3}\\S+$", 2, 5),
    ("^(ab|a\\n|abc)+$", 1, 4),
    ("^(?:[a-c]+|a[ -z]*)$", 0, 3),
]

GRAMMARS = {
    "nested": r'''
root ::= "[" (v ("," v)*)? "]"
v ::= "ab" | "abc" | "a" [a-z]* | root | "{" ("\"" [a-z]* "\"" | "\"a" [0-9]* "\"") "}"
''',
}

BYTES = sorted({*b'ab c\n"\\,[]{}09', 0xC3, 0xA9, 0xE6, 0x97, 0xA5, 0x01})


def _reachable(a, limit):
    """States reached from the start by byte steps over BYTES (row-less steps, then
    expansions), breadth first, at most limit of them."""
    seen, todo = {a.start}, [a.start]
    while todo and len(seen) < limit:
        s = todo.pop(0)
        for b in BYTES:
            t = a._step_byte(s, b) if not a.expanded[s] else int(a.trans[s, b])
            if t and t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(seen)


def _check(a, limit=400):
    states = _reachable(a, limit)
    # every row-less step taken so far against the NFA (a byte stack of -1 never
    # meets a live configuration: it is a guard), then the rows themselves
    for key, t in list(a._byte_steps.items()):
        s, b = divmod(key, 256)
        if not a.expanded[s]:
            assert t == reference_row(a, s)[b], (s, b, a.configs[s])
    multi = 0
    for s in states:
        a.expand(s)
        multi += len(a.configs[s]) > 1
        assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])
    return states, multi


@pytest.mark.parametrize("pattern,lo,hi", PATTERNS)
def test_length_region_successors_match_the_nfa(pattern, lo, hi, rows_by):
    g = frame_grammar(GrammarCompiler(byte_info()), pattern, lo, hi)
    a = g.automaton
    check_rows_by(a, rows_by)
    assert a.nfa.tick and a.nfa.need
    states, multi = _check(a)
    assert multi >= 3
    # counts reached the maximum (configurations that cannot fit were dropped: live)
    frames = a.stacks.frames
    assert any(frames[st][0] in a.nfa.length and frames[st][2] - 1 == hi
               for s in states for _n, st in a.configs[s] if st)
    if rows_by == "python":  # and the multi-configuration rows came from plans
        assert any(plan is not None for lay in a.rows._layouts.values() for plan in lay[2])


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_recursive_successors_match_the_nfa(name, rows_by):
    g = GrammarCompiler(byte_info()).compile_grammar(GRAMMARS[name])
    check_rows_by(g.automaton, rows_by)
    states, multi = _check(g.automaton)
    assert multi >= 3 and max(g.automaton.stacks.depth) >= 3
