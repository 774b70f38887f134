"""Chains of copies inside a length region (nfa.copies: `(\\S+\\s+){0,29}` in a maxLength
string is 29 copies of the word) and the slice search over them (copy_chains.CopyChains.down, used by slices.SliceBounds):
states moved down the chain for the search's horizon and for a step, exact as long as the
highest copy stays clear of the chain's end. Checked: the copies are the same NFA shifted
(the assumption), and masks equal brute force at every word count up to the limit, on a
vocabulary without the long-token tier so that the state's own slice depth decides."""

import random

import pytest

from furca.constrain import GrammarCompiler

from .conftest import accept_bytes, byte_info, walk_checking_masks

EXTRA = ["ab", "a b", "a " * 8, "a " * 5 + "a", " " * 16, "xy " * 5 + "z", "abcd" * 4, "a" * 17,
         "\u00e9 " * 8, "日本 " * 4, '",', "q" * 40, "w w"]


WORDS = {"type": "string", "pattern": r"^(?:\S+\s+){0,29}\S+$", "maxLength": 300}


@pytest.mark.parametrize("schema", [
    WORDS,
    {"type": "string", "pattern": r"^(?:[a-z]{2,} ){0,20}[a-z]+$", "maxLength": 200},
    {"type": "string", "pattern": r"^(?:(?:ab ){0,12}c\.)+$", "maxLength": 120},  # a chain inside a loop
])
def test_copies_are_the_same_nodes_shifted(schema):
    info = byte_info(EXTRA, long_tokens=0)
    nfa = GrammarCompiler(info).compile_json_schema(schema).automaton.nfa
    assert nfa.copies
    for b, stride, count, ticks in nfa.copies:
        assert ticks >= 1
        lo, hi = b, b + stride * (count - 1)  # copies 0 .. count-2 (the last one's end is the chain's end)

        def shift(t):
            return t + stride if lo <= t < hi else t
        for n in range(b, b + stride * (count - 2)):
            m = n + stride
            assert nfa.edges[m] == tuple((x, y, shift(t)) for x, y, t in nfa.edges[n])
            assert nfa.eps[m] == tuple(shift(t) for t in nfa.eps[n])
            assert (n in nfa.tick) == (m in nfa.tick)
            assert nfa.need.get(n) == nfa.need.get(m)
            for table in (nfa.call, nfa.counter, nfa.length, nfa.is_end):
                assert n not in table and m not in table
            if n in nfa.tick:
                assert not any(x <= 0xBF and y >= 0x80 for x, y, _t in nfa.edges[n])


@pytest.mark.parametrize("schema, word, limit", [
    (WORDS, "ab ", 30),
    ({"type": "string", "pattern": r"^(?:\S+\s+){0,11}\S+$", "maxLength": 90}, "xy ", 12),
    ({"type": "string", "pattern": r"^(?:[a-z]{2,} ){0,20}[a-z]+$", "maxLength": 200}, "ab ", 21),
    ({"type": "string", "pattern": r"^(?:(?:ab ){0,12}c\.)+$", "maxLength": 120}, "ab ", 12),
    ({"type": "array", "items": WORDS, "maxItems": 20}, "\u00e9 ", 30),
    ({"type": "array", "items": WORDS, "maxItems": 20}, "ab ", 30),
])
@pytest.mark.parametrize("long_tokens", [0, 3])
def test_masks_equal_brute_force_at_every_word_count(schema, word, limit, long_tokens):
    """long_tokens=3: the three longest tokens (40, 28 and 24 bytes) are walked from the
    state itself (or its abstract state), the rest take the mask of its canonical_short
    form."""
    info = byte_info(EXTRA, long_tokens=long_tokens)
    g = GrammarCompiler(info).compile_json_schema(schema)
    prefix = '["a","' if "items" in schema else '"'
    counts = sorted({0, 1, 2, 5, 9, limit // 2, limit - 9, limit - 7, limit - 5, limit - 4, limit - 3,
                     limit - 2, limit - 1})
    for seed, words in enumerate(c for c in counts if c >= 0):
        m = accept_bytes(g, prefix + word * words)
        walk_checking_masks(m, info, random.Random(seed), 24)


def test_a_word_limit_is_searched_on_the_first_copies():
    """The first search of a 30-word string moves its states down to the chain's first
    copies (a few new slice steps, not one per word), and a state near the limit steps
    over the first copies' steps."""
    info = byte_info(EXTRA, long_tokens=0)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema(WORDS)
    bounds = g.masks.slices
    assert bounds.slice_depth(accept_bytes(g, '"')._h.state, sl) == 0  # a space first: no word
    s = accept_bytes(g, '"a')._h.state
    assert bounds.slice_depth(s, sl) == sl.max_level
    first = len(bounds._steps[sl.name])
    assert first <= 8
    near = accept_bytes(g, '"' + "ab " * 24 + "a")._h.state
    assert bounds.slice_depth(near, sl) < sl.max_level  # "a a a a ..." ends the words
    b, stride, count, _t = g.automaton.nfa.copies[0]
    stepped = [x for x in bounds._steps[sl.name] if any(b + stride * 2 <= n < b + stride * (count - 5)
                                                        for n, _st in g.automaton.configs[x])]
    assert stepped  # near the limit: moved down for each step


def test_a_cut_search_that_meets_no_rule_end_settles_the_cut():
    """Near the word limit of an item in a counted array, the search with the array's
    counter cut dies on a string of spaces and words that never reaches the item's end
    (no accepting state): the state itself would die on it too, so it is not searched
    (slices.SliceBounds.slice_depth) and the cut is taken from then on."""
    info = byte_info(EXTRA, long_tokens=0)
    sl = info.slices()[0]
    g = GrammarCompiler(info).compile_json_schema({"type": "array", "items": WORDS, "maxItems": 20})
    bounds = g.masks.slices
    s = accept_bytes(g, '["a","' + "ab " * 26 + "a")._h.state
    cut, node = bounds._counter_cut(s)
    assert node is not None and cut != s
    assert bounds.slice_depth(s, sl) < sl.max_level
    assert bounds._cut_verdict[(sl.name, node)] is True
    assert s not in bounds._steps[sl.name]

