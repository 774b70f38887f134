"""Narrow pattern states through their abstract state (masks.TokenMasks._wide): a state
that takes "a" and "0" (a pattern's alphabet, such as `[a-z0-9_-]`, no space) now takes
its mask from its abstract state and the caller's continuation, as a state that takes
"a" and " " did. Inside the items of an array with maxItems, every item's count is part
of the real state, so each item's key pattern was a new state with a new walk of its
whole alphabet (Github_easy o9925: ~2.3 ms a item near maxItems); its abstract state is
the same for every item. Masks are compared with brute force along walks through
several items, and the items' states are seen to share one abstract mask."""
from __future__ import annotations

import random
import sys

import pytest

from furca.constrain import GrammarCompiler, _walk

from .conftest import accept_bytes, byte_info, walk_checking_masks

EXTRA = ["ab", "a-b", "_x", "9-", "abc", "x" * 12, 'ab"', '",', '","', '"n', '":', '1}', '},{"', '}]', "key",
         '"key', '":"', "-", "__"]

SCHEMA = {"type": "object", "required": ["tags"], "properties": {"tags": {
    "type": "array", "maxItems": 12, "items": {
        "type": "object", "required": ["key", "n"], "properties": {
            "key": {"type": "string", "pattern": "^[a-z0-9_-]{1,20}$"}, "n": {"type": "integer"}}}}}}


@pytest.fixture(scope="module")
def info():
    return byte_info(EXTRA)


def _item_starts(g, k):
    """The matcher after each of k items' `{"key":"` (and the states there)."""
    text = '{"tags":['
    out = []
    for i in range(k):
        text += ("," if i else "") + '{"key":"'
        m = accept_bytes(g, text)
        out.append(m)
        text += f'k{i}-x","n":{i}}}'
    return out


@pytest.mark.skipif(_walk.get_walk_range() is None, reason="abstract masks are compiled walks'")
def test_items_share_the_key_patterns_abstract_mask(info):
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    ms = _item_starts(g, 8)
    states = [m._t[0] for m in ms]
    assert len(set(states)) == len(states)  # one real state per item: the count is in it
    for m in ms:
        walk_checking_masks(m.fork(), info, random.Random(len(states)), 1)  # each item's first mask, checked
    abstract = {g.masks.split.context(s)[0] for s in states}
    assert len(abstract) == 1  # the same abstract state for every item...
    assert abstract <= set(g.masks.split._abs)  # ...whose mask was computed once and shared


@pytest.mark.skipif(_walk.get_walk_range() is None, reason="abstract masks are compiled walks'")
@pytest.mark.parametrize("seed", range(6))
def test_masks_through_items_equal_brute_force(info, seed):
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    for m in _item_starts(g, 3 + seed % 3):
        walk_checking_masks(m, info, random.Random(seed), 25)


@pytest.mark.skipif(_walk.get_walk_range() is None, reason="the compiled walks make the rows they meet")
@pytest.mark.parametrize("seed", range(3))
def test_a_narrow_states_row_is_left_to_its_walk(info, seed):
    """A state that is not wide (its nodes take no "a" with a space or a digit: an
    integer's start, a key's closing quote) has no slice level, so its mask is walked
    without its row first made through `expand`: the walk makes it (in the row kernel,
    or through resume without it). Its masks, and those after it, equal brute force."""
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    a = g.automaton
    asked = []
    expand = a.expand
    a.expand = lambda s: asked.append((s, sys._getframe(1).f_code.co_name)) or expand(s)
    m = accept_bytes(g, '{"tags":[{"key":"k0-x","n":')
    s = m._t[0]
    assert not g.masks._wide(s) and not a.expanded[s]
    walk_checking_masks(m.fork(), info, random.Random(seed), 1)  # its mask, checked
    assert a.expanded[s] or a.walkable[s]  # the walk gave it its row
    assert (s, "_compute_mask") not in asked
    walk_checking_masks(m, info, random.Random(seed), 25)
