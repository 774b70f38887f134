"""A tokenizer's tables for the matcher's watches (unique.py's arrays of strings,
members.py's objects, unique_values.py's arrays of values): the token trie read for the
tokens with a given prefix, and the tokens with one / two / three quotes or a comma.
Made once per tokenizer in a process and kept on its TokenizerInfo."""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

QUOTE, BACKSLASH, CLOSE, COMMA = 0x22, 0x5C, 0x5D, 0x2C



class _TokenTables:
    """A tokenizer's tokens for the watch, read off its token trie (TokenizerInfo.trie):
    the ids of the tokens with a given prefix (a walk down the BFS trie, children found
    by bisection; the node's DFS subtree is a contiguous run of token ids), and of those
    with one / two / three quote bytes or a comma (counted down the BFS levels). ~5 ms for
    a 128k vocabulary, once per tokenizer in a process."""

    def __init__(self, info):
        trie = self.trie = info.trie
        quotes = np.zeros(trie.num_nodes + 1, dtype=np.int32)  # + the sentinel of tokenless ids
        commas = np.zeros(trie.num_nodes + 1, dtype=bool)
        starts = trie.level_start
        for d in range(1, len(starts) - 1):
            lo, hi = int(starts[d]), int(starts[d + 1])
            up = trie.parent[lo:hi]
            quotes[lo:hi] = quotes[up] + (trie.byte[lo:hi] == QUOTE)
            commas[lo:hi] = commas[up] | (trie.byte[lo:hi] == COMMA)
        per_token = quotes[trie.token_node]
        self.one_quote = np.flatnonzero(per_token >= 1)
        self.two_quotes = np.flatnonzero(per_token >= 2)
        self.three_quotes = np.flatnonzero(per_token >= 3)
        self.comma = np.flatnonzero(commas[trie.token_node])
        # inside an item of a finite list: a token may close it and write a comma after
        # which no value is left
        self.closing = np.union1d(self.two_quotes, np.intersect1d(self.one_quote, self.comma))
        # BFS children are contiguous and in byte order: found by bisection (memoryviews
        # give bisect Python ints); a node's DFS index bounds its subtree's token ids
        self._byte = memoryview(trie.byte)
        self._first = memoryview(trie.first_child)
        self._count = memoryview(trie.num_children)
        self._dfs = memoryview(trie.bfs_to_dfs)
        self._cache: dict[bytes, np.ndarray] = {}

    def _node(self, data: bytes):
        """The DFS trie node of data, or None when no token starts with it."""
        byte, first, count = self._byte, self._first, self._count
        n = 0
        for b in data:
            lo = first[n]
            hi = lo + count[n]
            i = bisect_left(byte, b, lo, hi)
            if i >= hi or byte[i] != b:
                return None
            n = i
        return self._dfs[n]

    def with_prefix(self, prefix: bytes) -> np.ndarray:
        """The ids of the tokens whose bytes start with prefix (cached)."""
        hit = self._cache.get(prefix)
        if hit is None:
            n = self._node(prefix)
            if n is None:
                hit = _NONE
            else:
                t = self.trie
                hit = t.tok_ids[t.tok_start.item(n):t.tok_start.item(t.dfs_end.item(n))]
            if len(self._cache) >= 8192:
                self._cache.clear()
            self._cache[prefix] = hit
        return hit


_NONE = np.zeros(0, dtype=np.int32)


def _tables(info) -> _TokenTables:
    """The watch's tables of a tokenizer, made on first use and kept on its info (two
    threads making them at once both get equal tables)."""
    t = info._unique_tables
    if t is None:
        t = info._unique_tables = _TokenTables(info)
    return t
