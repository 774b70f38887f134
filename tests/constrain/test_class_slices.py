"""Slices of narrower alphabets (token_slices.CLASS_SLICES): a state inside a string pattern
such as `\\w*` or `[a-z0-9-]+` takes no space, so the JSON string slice never applied and
its mask walked every token of the alphabet (with a space, token_slices.SPACE_SLICES: a
pattern that refuses an accented letter or a `*` kills the JSON string slice at once).
Such a state now sets the slice's tokens at once and its walk skips the trie's subtrees
that hold only those (TokenTrie.subtrees_with, the walks' `keep`). The masks are compared with brute force (each token tried on a fork
of the matcher) along random walks, with tokens on both sides of the length levels (10
and 16 characters), tokens that leave the alphabet or close the string, and the slices
are seen to be taken (or, where a maxLength past nfa.COUNTER_THRESHOLD makes a counter
over the pattern's character, the tables of string_counters.py)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, _walk
from furca.constrain.masks import TokenMasks
from furca.constrain.token_trie import TokenTrie

from .conftest import accept_bytes, byte_info, spy_string_tables, walk_checking_masks

EXTRA = ["ab", "abc", "abc_1", "Ab9", "a-b", "a.b", "x" * 9, "x" * 10, "y" * 11, "z" * 16, "q" * 17, "w9" * 9,
         'abc"', 'ab",', 'a"}', "-9", "..", "a b", '"a', "_x", "A_B-c.d", "%", "%2F", "é", '":', '"}', "abc/",
         "1234567890", "12345678901234567", "a\\", "\\n", " ab", "ab cd", "a b c d e f g h", "a b c d e f g h i",
         "a*b", " *", "~ ~"]

PATTERNS = [  # (pattern, the slice its string states take)
    (r"^\w*$", "word"),
    (r"^[a-z0-9-]+$", "lower_digit_dash"),
    (r"^[A-Za-z0-9]{3,12}$", "alnum"),
    (r"^[\w.-]+$", "ident"),
    (r"^\S+$", "nonspace"),
    # with a space, where a JSON string character kills the state at once (SPACE_SLICES)
    (r"^[ -~]*$", "ascii_text"),
    (r"^[^*/:<>?|]+$", "alnum_space"),
    (r"^[a-zA-Z0-9 ._-]{2,40}$", "alnum_space"),
]


@pytest.fixture(scope="module")
def info():
    return byte_info(EXTRA)


def test_subtrees_with_matches_brute_force():
    rng = random.Random(3)
    words = sorted({bytes(rng.choice(b"abc") for _ in range(rng.randint(1, 5))) for _ in range(60)})
    trie = TokenTrie(words)
    flags_by_token = {t: rng.random() < 0.2 for t in range(len(words))}
    keep = trie.subtrees_with(np.array([flags_by_token[int(t)] for t in trie.tok_ids]))
    node_of = {t: int(trie.token_node_dfs[t]) for t in range(len(words))}
    for i in range(trie.num_nodes):
        below = [t for t, n in node_of.items() if i <= n < trie.dfs_end[i]]
        assert bool(keep[i]) == any(flags_by_token[t] for t in below), i
    assert keep.any() and not keep.all()


@pytest.mark.skipif(_walk.get_walk() is None, reason="the walks' keep is a compiled walk's")
@pytest.mark.parametrize("max_length", [None, 12, 18])
@pytest.mark.parametrize("pattern,slice_name", PATTERNS)
def test_pattern_masks_equal_brute_force(info, pattern, slice_name, max_length, monkeypatch):
    taken = []
    orig = TokenMasks._slice_level

    def spy(self, s, row):
        level = orig(self, s, row)
        if level is not None:
            taken.append(next(sl.name for sl in info.slices() + info.class_slices() + info.space_slices()
                              if any(level is lv for lv in sl.levels + list(sl._exact.values()))))
        return level

    monkeypatch.setattr(TokenMasks, "_slice_level", spy)
    served = spy_string_tables(monkeypatch)
    value = {"type": "string", "pattern": pattern}
    if max_length:
        value["maxLength"] = max_length
    schema = {"type": "object", "properties": {"v": value, "n": {"type": "integer"}}, "required": ["v"]}
    g = GrammarCompiler(info).compile_json_schema(schema)
    for seed in range(4):
        walk_checking_masks(accept_bytes(g, '{"v":"'), info, random.Random(seed), 30)
    # a counter over the pattern's character: its tables serve (string_counters.py) where
    # the character's DFA is small (`\S`'s is not: the slice then)
    assert slice_name in taken or (g.automaton.nfa.counter and any(served)), taken
