"""Rows of single-configuration states on plain nodes, built inside the compiled walks
(plain_rows.PlainRows, _walk.expand_plain): the kernels expand such states and intern
their successors themselves, and PlainRows.sync hands the new states to the automaton's
Python tables (off by default, plain_rows.ENABLED; switched on here). Every row is checked byte by byte against the NFA's edges, the state
tables against each other (one id per configuration set), and the masks against every
token stepped alone."""

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, _walk, plain_rows
from furca.constrain.plain_rows import MIN_TABLE

from .conftest import byte_info, walk_checking_masks
from .test_rows import reference_row

needs_numba = pytest.mark.skipif(_walk.get_walk() is None, reason="the compiled walks need numba")


@pytest.fixture(autouse=True)
def plain_rows_on(monkeypatch):
    """The compiled rows are off by default (plain_rows.ENABLED): on for these tests."""
    monkeypatch.setattr(plain_rows, "ENABLED", True)

EXTRA = ['"', '",', '"x', 'ab"', '"}', "ab", "abc", "abcdefghij", "0123", "1e5", "日本", "\xe6", '{"', '":', "[[", "]]",
         "hello world", "12345678", "0.12345", "deadbeef", "-0123-", "beef", "2024-01-", "T12:30:", "ation", "inter",
         "national"]

SCHEMAS = {
    # strings and numbers: long runs of plain nodes (string body, digits)
    "object": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "number"},
                                                "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["name"]},
    # a bounded string: its body runs on a counter frame (stacks the kernel carries along)
    "bounded": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 40},
                                                 "p": {"type": "string", "pattern": "^[a-f0-9]{4,12}$"}}},
    # JSON mode: the same positions at several nesting depths (same nodes, other stacks)
    "any": {},
    # chains of plain nodes: a fixed-shape pattern, long enum literals, a format
    "ids": {"type": "object", "required": ["id", "kind", "when"], "properties": {
        "id": {"type": "string", "pattern": "^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$"},
        "kind": {"enum": ["international", "internationalization", "interaction", "internal"]},
        "when": {"type": "string", "format": "date-time"}}},
}
KERNEL_ROWS = {"object": 3, "bounded": 3, "any": 3, "ids": 40}  # at least (68 with these tokens)


def count_python_rows(a):
    """From now on, counts the rows Rows.single / Rows.multi write (a.python_rows[0]); the
    kernels' rows are the other states expanded since (a.rows_before: those before)."""
    a.python_rows = [0]
    a.rows_before = int(a.expanded[1 : a.num_states].sum())
    for name in ("single", "multi"):
        f = getattr(a.rows, name)

        def counted(*args, f=f):
            a.python_rows[0] += 1
            return f(*args)
        setattr(a.rows, name, counted)


def kernel_rows(a):
    return int(a.expanded[1 : a.num_states].sum()) - a.rows_before - a.python_rows[0]


def check_tables(a):
    """Every state's (configurations, accepting) maps back to its id, once."""
    assert len(a.configs) == len(a.accepting) == a.num_states
    keys = [(c, acc) for c, acc in zip(a.configs, a.accepting)]
    assert len(set(keys)) == len(keys)
    for sid, key in enumerate(keys):
        assert a._state_ids[key] == sid


@needs_numba
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_kernel_rows_match_the_nfa(name):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMAS[name])
    a = g.automaton
    count_python_rows(a)
    rng = random.Random(11)
    for _ in range(10):
        walk_checking_masks(g.matcher(), info, rng, 40)
    # the kernels wrote rows (and not only Python: both paths met)
    assert kernel_rows(a) >= KERNEL_ROWS[name]
    expanded = [s for s in range(1, a.num_states) if a.expanded[s]]
    assert a.python_rows[0] > 0
    check_tables(a)
    for s in expanded:
        assert a.trans[s].tolist() == reference_row(a, s), (s, a.configs[s])
    # every row the kernels may write is also ready for them, and no other
    assert (a.plain.rowdone[: a.num_states] == a.expanded[: a.num_states]).all()


@needs_numba
def test_kernel_states_survive_table_growth():
    # many states: the transition table and the hash table both grow between kernel calls
    # (a kernel stops when out of room, and resumes after Python grows them)
    info = byte_info(EXTRA + ["abcdefghijklmnopqrstuvwxyz" * 2, "x" * 40])
    g = GrammarCompiler(info).compile_json_schema(
        {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 3})
    a = g.automaton
    count_python_rows(a)
    m = g.matcher()
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for ch in '["' + "abcdefghij" * 29 + '","' + "x" * 250 + '"]':
        m.fill_bitmask(bm)
        assert m.accept_token(ord(ch))
    assert m.can_terminate()
    # 1,056 states, a 2,048-slot table, 45 kernel rows with these tokens
    assert a.num_states > 1024 and len(a.plain.keys) > MIN_TABLE and kernel_rows(a) > 20
    check_tables(a)
    expanded = [s for s in range(1, a.num_states) if a.expanded[s]]
    for s in expanded[::5]:
        assert a.trans[s].tolist() == reference_row(a, s), s


@needs_numba
def test_llama_masks_with_kernel_rows(llama):
    # masks over the Llama-3.1 vocabulary agree with each token stepped alone while the
    # kernels build rows (a fresh compile: every state new)
    info, _compiler, tok = llama
    g = GrammarCompiler(info).compile_json_schema(SCHEMAS["bounded"])
    count_python_rows(g.automaton)
    m = g.matcher()
    ids = tok.encode('{"s":"hello world, twelve","p":"deadbeef"}', add_special_tokens=False).ids
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    rng = random.Random(3)
    for t in ids:
        m.fill_bitmask(bm)
        bits = np.unpackbits(bm.view(np.uint8), bitorder="little")
        for p in rng.sample(range(info.vocab_size), 300) + [t]:
            assert bool(bits[p]) == m.fork().accept_token(p), p
        assert m.accept_token(t)
    assert kernel_rows(g.automaton) > 0
    check_tables(g.automaton)
