"""Vocabulary slices: the tokens made only of one alphabet's characters, in length levels,
that a mask takes whole where the slice search proves them allowed (slices.py, masks.py).

TokenizerInfo builds one TokenSlice per entry of SLICES (the JSON string slice, with
rest tries), CLASS_SLICES (narrower alphabets without a space) and SPACE_SLICES
(narrower alphabets with one), once per tokenizer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .ir import _split_utf8
from .token_trie import TokenTrie

if TYPE_CHECKING:
    from .tokenizer import TokenizerInfo


# JSON string content (no quote, backslash or control character): most of a vocabulary.
SLICES = [("json_string_char", [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])]

# The alphabets of common string patterns (`\S+`, `[\w.-]+`, `\w*`, `[a-zA-Z0-9]+`,
# `[a-z0-9-]+`), largest first: a state inside such a pattern allows no space, so the JSON
# string slice never applies, and its mask walked every token of the alphabet (~35-50k of
# Llama-3.1's, 0.3-0.5 ms a mask). Taken through the whole trie (TokenSlice, rest_tries=False).
CLASS_SLICES = [
    ("nonspace", [(0x21, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]),
    ("ident", [(0x2D, 0x2E), (0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]),
    ("word", [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]),
    ("alnum", [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]),
    ("lower_digit_dash", [(0x2D, 0x2D), (0x30, 0x39), (0x61, 0x7A)]),
]

# The alphabets with a space of patterns that refuse some JSON string character (ASCII
# text without a backslash: `^[ -~]*$`-like; letters, digits and spaces: a file name's
# `^[^*/:<>?|]+$`, `^[a-zA-Z0-9 ._-]*$`), largest first: the JSON string slice dies at
# once there (depth 0: an accented letter, a `*`), and each such mask walked the whole trie
# (~120k tokens allowed, 2-3.6 ms). Tried only where the JSON string slice's depth is 0.
SPACE_SLICES = [
    ("ascii_text", [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]),
    ("alnum_space", [(0x20, 0x20), (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]),
]


class TokenSlice:
    """Tokens made only of characters in ``ranges`` (whole UTF-8 characters), in length
    levels: for each threshold L in ``LEVELS`` (and for "any length"), the packed bitmask
    of the slice's tokens of at most L characters and how to walk every other token
    (llguidance's "slicer", with lengths). A state from which every string of L slice
    characters stays alive allows that bitmask at once and walks only the other tokens.

    ``levels``: (L, packed bitmask, trie, keep) per level. With rest_tries (the JSON
    string slice: ~95% of a vocabulary, so a small rest), trie holds only the other
    tokens and keep is None. Without (a narrower alphabet, whose rest is most of the
    vocabulary: a trie of it would cost ~0.3 s and ~6 MB a level), trie is the
    tokenizer's whole trie and keep[i] says whether DFS node i's subtree holds a token
    outside the level: the walks skip the other subtrees unvisited (_walk.py), which
    visits the nodes a rest trie would hold, plus one check per skipped child.
    ``first_byte_list``: the bytes that start a slice character (a state must take
    every one for a depth of 1 or more)."""

    LEVELS = (16, 10)

    def __init__(self, info: "TokenizerInfo", name: str, ranges, rest_tries: bool = True):
        self.name = name
        self.ranges = ranges
        klass = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
        pat = re.compile(f"[{klass}]+")
        char_len = np.zeros(info.num_words * 32, dtype=np.int32)  # 0 = not in the slice
        for i, b in enumerate(info.token_bytes):
            if not b:
                continue
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if pat.fullmatch(text):
                char_len[i] = len(text)
        # every level's source (a token of more than 255 characters is longer than any level)
        self._char_len = np.minimum(char_len, 255).astype(np.uint8)
        self.levels = []  # (L, packed mask of slice tokens with <= L chars, trie of the rest or whole, keep)
        trie = info.trie
        for L in (1 << 30,) + self.LEVELS:  # 1 << 30: every slice token (slices.UNBOUNDED)
            short, packed = self._short(L)
            if rest_tries:
                rest = [None if short[i] else b for i, b in enumerate(info.token_bytes)]
                self.levels.append((L, packed, TokenTrie(rest), None))
            else:
                self.levels.append((L, packed, trie, trie.subtrees_with(~short[trie.tok_ids])))
        self.max_level = max(self.LEVELS)  # levels the depth search looks ahead
        self._exact: dict[int, tuple] = {}
        self.utf8_seqs = [seq for lo, hi in ranges for seq in _split_utf8(lo, hi)]
        self.first_bytes = 0  # bit b set: some slice character starts with byte b
        for seq in self.utf8_seqs:
            self.first_bytes |= (1 << (seq[0][1] + 1)) - (1 << seq[0][0])
        self.first_byte_list = np.array([b for b in range(256) if self.first_bytes >> b & 1], dtype=np.intp)

    def exact(self, r: int) -> tuple:
        """The level of a state whose depth is exactly r, below max_level
        (slices.SliceBounds.tight: every string of at most r slice characters keeps it
        alive, every one of r + 1 kills it): (r, packed bitmask of the slice's tokens of
        at most r characters, the "any length" level's trie and keep), so the walk goes
        over the tokens outside the slice only (the slice's longer tokens are all
        refused). Made on first use, cached (a dictionary write: thread-safe)."""
        hit = self._exact.get(r)
        if hit is None:
            _L, _bits, trie, keep = self.levels[0]
            hit = self._exact[r] = (r, self._short(r)[1], trie, keep)
        return hit

    def _short(self, L: int):
        """(per token: in the slice with at most L characters, the same as packed int32 words)."""
        short = (self._char_len > 0) & (self._char_len <= L)
        packed = np.packbits(short, bitorder="little").view("<i4").copy()
        packed.setflags(write=False)  # shared: masks start from it, stored masks refer to it (masks.Delta)
        return short, packed
