"""Transition rows (automaton.LazyAutomaton.expand): a state of one configuration from its
node's byte classes, a state of several from the runs of bytes that meet the same edges
of every configuration (a layout per tuple of NFA nodes, shared by the states on the
same nodes with other stacks), with successors looked up by their targets (states that
converge on the same configurations share one) and built from the targets' relative
closures pushed on each configuration's stack. Every row is checked byte by byte
against the NFA's edges directly, computed both ways: by rows.py (FURCA_CORE=0) and by
the kernel of core_rows.py (the default with numba), which must give the same
states."""

import random

import pytest

from furca.constrain import GrammarCompiler, automaton, core_rows

from .conftest import byte_info, walk_checking_masks


@pytest.fixture(params=["python", "kernel"])
def rows_by(request, monkeypatch):
    """Which computes the rows of the automata made in the test: rows.py, or the kernel
    (core_rows.py; skipped without numba)."""
    monkeypatch.setenv("FURCA_CORE", "0" if request.param == "python" else "1")
    monkeypatch.setattr(automaton, "CORE_AFTER", 0)  # the kernel from the first row
    if request.param == "kernel" and not core_rows.enabled():
        pytest.skip("numba is not installed (or FURCA_NO_NUMBA is set)")
    return request.param


def check_rows_by(a, rows_by):
    """The automaton computes its rows as the test asked."""
    assert (a.core is not None) == (rows_by == "kernel")

EXTRA = ['"', '",', '"x', 'ab"', '"}', '"x,', "ab", "abc", "[{", "}]", "日", "\xe6", "abcdefghij", '{"a', '":']

# alternatives that share prefixes (states of several configurations), the same
# alternatives reached at several nesting depths (same nodes, other stacks), a counter
GRAMMARS = {
    "alternatives": r'''
root ::= "{" item ("," item)* "}"
item ::= "ab" [a-z]* | "a" [b-d] "x" | [a-c]+ "y" | "[" root "]" | "\"" [a-z日]{0,20} "\""
''',
    "nested": r'''
root ::= "[" (v ("," v)*)? "]"
v ::= "ab" | "abc" | "a" [a-z]+ | root | "{" ("\"" [a-z]* "\"" | "\"a" [0-9]* "\"") "}"
''',
}


def reference_row(a, s):
    """State s's row from the NFA's edges, one byte at a time (no template, no cache of
    rows): the state of the closure of every target a configuration reaches on b (in a
    length region, on the stack after the byte: Closures.byte_stack, -1 past the maximum)."""
    row = []
    for b in range(256):
        targets = [(x, st) for n, st0 in a.configs[s] for lo, hi, x in a.nfa.edges[n] if lo <= b <= hi
                   for st in (a.byte_stack(n, st0),) if st >= 0]
        row.append(a.intern(*a.closure_of(targets)) if targets else 0)
    return row


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_rows_match_the_nfa_byte_by_byte(name, rows_by):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(GRAMMARS[name])
    a = g.automaton
    check_rows_by(a, rows_by)
    rng = random.Random(5)
    for _ in range(12):
        walk_checking_masks(g.matcher(), info, rng, 25)
    expanded = [s for s in range(1, a.num_states) if a.expanded[s]]
    multi = [s for s in expanded if len(a.configs[s]) > 1]
    by_nodes = {}
    for s in multi:
        by_nodes.setdefault(tuple(n for n, _ in a.configs[s]), set()).add(tuple(st for _, st in a.configs[s]))
    # the walks reached rows of several configurations, and the same nodes under
    # different stacks (whose successors must keep their own stacks)
    assert len(multi) >= 5
    if name == "nested":
        assert any(len(stacks) > 1 for stacks in by_nodes.values())
    if rows_by == "python":
        if name == "nested":  # states on the same nodes share one byte layout (rows.Rows._layout)
            assert set(a.rows._layouts) - {()} == set(by_nodes) and len(by_nodes) < len(multi)
        # new successors of several configurations came from the buckets' plans (rows._plan):
        # targets' relative closures pushed on their configuration's stack (frames pushed too),
        # and the full closure for targets whose rule may end (they return through the stack)
        entries = [e for lay in a.rows._layouts.values() for plan in lay[2] or () if plan is not None for e in plan]
        assert any(e[2] is None for e in entries)
        assert any(e[2] is not None and any(rel for _n, rel in e[2]) for e in entries)
    else:  # no row came from rows.py
        assert not a.rows._layouts
    for s in expanded:
        assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])


def test_json_mode_rows_at_several_depths(rows_by):
    # JSON mode is recursive: the states of one object or array position at each
    # nesting depth sit on the same nodes; each row must still lead to its own depth
    info = byte_info(['{"', '":', '[[', ']]', '"a"', "true", "nul"])
    g = GrammarCompiler(info).compile_json_schema({})
    a = g.automaton
    check_rows_by(a, rows_by)
    m = g.matcher()
    text = '{"a":[[{"b":[1,{"c":[[true,null]]}]}]],"d":{"e":{"f":[{}]}}}'
    assert m.accept_string(text) and m.can_terminate()
    for s in [a.start, *range(1, a.num_states)]:
        if not a.expanded[s]:
            a.expand(s)
        assert a.trans[s].tolist() == reference_row(a, s), s
    depths = {a.stacks.depth[st] for s in range(1, a.num_states) for _n, st in a.configs[s]}
    assert max(depths) >= 6


def test_rows_of_many_runs_and_of_length_regions(rows_by):
    # after "a": two configurations whose byte classes interleave (26 runs with targets:
    # the row is filled through a byte -> bucket array, rows.MAX_SPANS), and states of few
    # runs (filled as slices); a length region (nfa.tick: a byte may change the stack, a
    # count past the maximum takes no byte, Closures.live drops what cannot fit: the plans
    # push the relative closures on the stacks after the byte) under the same check
    from furca.constrain import rows

    info = byte_info(EXTRA + ["a b", "ab cd", "a-b"])
    g = GrammarCompiler(info).compile_grammar(r'''
root ::= "a" x | "a" y | "a" [a-z]{2}
x ::= [acegikmoqsuwy] "1"
y ::= [bdfhjlnprtvxz] "2"
''')
    a = g.automaton
    check_rows_by(a, rows_by)
    a.expand(a.start)
    s = int(a.trans[a.start, ord("a")])
    a.expand(s)
    assert len(a.configs[s]) == 3 and a.trans[s].tolist() == reference_row(a, s)
    if rows_by == "python":
        fills = [lay[0] for lay in a.rows._layouts.values()]
        assert any(not isinstance(f, tuple) for f in fills)
    for b in (ord("a"), ord("b")):
        t = int(a.trans[s, b])
        a.expand(t)
        assert len(a.configs[t]) == 2 and a.trans[t].tolist() == reference_row(a, t)
    if rows_by == "python":
        assert any(isinstance(f, tuple) for f in [lay[0] for lay in a.rows._layouts.values()])
    assert rows.MAX_SPANS < 26

    g = GrammarCompiler(info).compile_json_schema(
        {"type": "string", "pattern": "^(?:\\S+\\s+){0,29}\\S+$", "minLength": 2, "maxLength": 7})
    a = g.automaton
    assert a.nfa.tick
    rng = random.Random(7)
    for _ in range(12):
        walk_checking_masks(g.matcher(), info, rng, 12)
    multi = [s for s in range(1, a.num_states) if a.expanded[s] and len(a.configs[s]) > 1]
    assert multi
    if rows_by == "python":  # the successors came from plans there too (rows.from_plan with Closures.live)
        assert any(plan is not None for lay in a.rows._layouts.values() for plan in lay[2])
    for s in range(1, a.num_states):
        if a.expanded[s]:
            assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])


def test_tables_grow_past_the_reserve(monkeypatch):
    # past RESERVE_AFTER states the transition table is reserved at MAX_STATES rows (no
    # copy of a big table inside a later step) while the per-state arrays keep doubling;
    # every row and flag survives each growth, and masks stay exact across it
    from furca.constrain import automaton

    monkeypatch.setattr(automaton, "RESERVE_AFTER", 128)
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(
        {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 40})
    a = g.automaton
    rng = random.Random(3)
    for _ in range(30):
        walk_checking_masks(g.matcher(), info, rng, 20)
    assert a.num_states > 256
    assert len(a.trans) == automaton.MAX_STATES
    for x in (a.expanded, a.acc, a.short, a.full, a.room):
        assert a.num_states <= len(x) < 4 * a.num_states
    assert a.acc[: a.num_states].tolist() == a.accepting
    for s in range(1, a.num_states):
        if a.expanded[s]:
            assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])


def test_one_growth_takes_the_room_asked(monkeypatch):
    # _grow(need) doubles as many times as need takes, at once (a walk asks room for a
    # row's 257 new states): every row and flag kept; with the row kernel the automaton
    # starts with that room and its table reserved, so its first mask grows nothing
    monkeypatch.setenv("FURCA_CORE", "0")
    info = byte_info(EXTRA)
    schema = {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 40}
    a = GrammarCompiler(info).compile_json_schema(schema).automaton
    assert a._cap == 64 and len(a.trans) == 64
    for s in range(a.num_states):
        a.expand(s)
    rows = [a.trans[s].tolist() for s in range(a.num_states)]
    flags = [x[: a.num_states].tolist() for x in (a.expanded, a.acc)]
    a._grow(1000)
    assert a._cap == 1024 and len(a.trans) == automaton.MAX_STATES and len(a.expanded) == 1024
    assert [a.trans[s].tolist() for s in range(len(rows))] == rows
    assert [x[: len(rows)].tolist() for x in (a.expanded, a.acc)] == flags
    monkeypatch.setenv("FURCA_CORE", "1")
    if core_rows.enabled():  # numba installed: the kernel walks
        grows = []
        real = automaton.LazyAutomaton._grow
        monkeypatch.setattr(automaton.LazyAutomaton, "_grow", lambda self, need=0: grows.append(need) or real(self, need))
        g = GrammarCompiler(info).compile_json_schema(schema)
        assert g.automaton._cap == automaton.FIRST_WALK_CAP and len(g.automaton.trans) == automaton.MAX_STATES
        walk_checking_masks(g.matcher(), info, random.Random(5), 3)
        assert not grows


def test_a_dropped_table_serves_the_next_grammar(monkeypatch):
    # the reserved table of an automaton no longer referenced (nor any view of it) goes
    # to a pool, and the next reservation takes it with its old rows in place: masks stay
    # exact over those rows (a row is read only once its state has written it)
    import gc

    from furca.constrain import automaton, tables

    info = byte_info(EXTRA)
    GrammarCompiler(info)  # the tokenizer's warm-up grammars first, outside the pool
    pool = tables._TablePool()
    monkeypatch.setattr(tables, "_TABLES", pool)
    monkeypatch.setattr(automaton, "RESERVE_AFTER", 64)
    schema = {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 40}
    g = GrammarCompiler(info).compile_json_schema(schema)
    rng = random.Random(4)
    for _ in range(10):
        walk_checking_masks(g.matcher(), info, rng, 20)
    assert len(g.automaton.trans) == automaton.MAX_STATES
    row = g.automaton.trans[5]  # a view keeps the table out of the pool
    del g
    gc.collect()
    assert len(pool._free) == 0
    del row
    gc.collect()
    assert len(pool._free) == 1
    # another grammar: other states, other rows
    g = GrammarCompiler(info).compile_json_schema({"type": "array", "items": {"type": "string", "maxLength": 25}})
    for _ in range(30):
        walk_checking_masks(g.matcher(), info, rng, 20)
    a = g.automaton
    assert a.num_states > 64 and len(a.trans) == automaton.MAX_STATES and len(pool._free) == 0
    for s in range(1, a.num_states):
        if a.expanded[s]:
            assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])
