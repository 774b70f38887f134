"""The values watch's per-tokenizer tables (unique_values.py), built once a process and
kept on token_tables.py's tables: the tokens by how many levels they close read from
inside or outside a string, those that may complete an item between items or after a
bare one, those with a quote and a backslash, those that may close a string item and
write a whole item after it, and the tokens that are prefixes of a text (`along`)."""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from .token_tables import BACKSLASH, CLOSE, QUOTE, _tables
from .value_reader import CLOSE_OBJ, OPEN_ARR, OPEN_OBJ, START, _read


class ValueTables:
    """A tokenizer's tokens for this watch (built once, kept on token_tables.py's tables): by the
    levels they close read from outside / inside a string, the tokens that may complete
    an item between items or after a bare one, those with a quote and a backslash, and
    the tokens that are prefixes of a text (`along`)."""

    def __init__(self, info, t):
        self.t = t
        self.max_len = info.max_token_len
        tokens = info.token_bytes
        closing = _containing(t.trie, b"}]")
        up = [np.zeros(len(tokens), dtype=np.int16), np.zeros(len(tokens), dtype=np.int16)]
        for i in closing.tolist():
            up[0][i], up[1][i] = _levels_closed(tokens[i], False), _levels_closed(tokens[i], True)
        self._up = up
        self._by_up: dict[tuple, np.ndarray] = {}
        self.delims = _containing(t.trie, b",]")
        self.has_comma = np.zeros(len(tokens), dtype=bool)  # by token id: t.comma's tokens
        self.has_comma[t.comma] = True
        self._ws = None
        self.between = np.union1d(np.union1d(self.delims, closing), t.two_quotes)
        self.quote_escape = np.array([i for i in t.one_quote.tolist() if b"\\" in tokens[i]], dtype=np.int64)
        # tokens that may close a string item and write a whole item after it (a repeat
        # inside the token): after their first quote, an item completes
        more = np.intersect1d(t.one_quote, np.union1d(np.union1d(self.delims, closing), t.two_quotes))
        self.close_then_item = np.array([i for i in more.tolist() if _completes_after_quote(tokens[i])],
                                        dtype=np.int64)

    def closing(self, in_string: bool, depth: int) -> np.ndarray:
        """The tokens that close at least depth levels read from (inside a string or not)."""
        key = (in_string, depth)
        hit = self._by_up.get(key)
        if hit is None:
            hit = self._by_up[key] = np.flatnonzero(self._up[in_string] >= depth)
        return hit

    def with_ws(self) -> np.ndarray:
        """The tokens with a whitespace byte (they end a bare item where whitespace may follow it)."""
        if self._ws is None:
            self._ws = _containing(self.t.trie, b" \t\n\r")
        return self._ws

    def along(self, text: bytes, out: list) -> None:
        """Appends the ids of the tokens whose bytes are a prefix of text."""
        t = self.t
        trie = t.trie
        byte, first, count, dfs = t._byte, t._first, t._count, t._dfs
        n = 0
        for b in text[:self.max_len]:
            lo = first[n]
            hi = lo + count[n]
            i = bisect_left(byte, b, lo, hi)
            if i >= hi or byte[i] != b:
                return
            n = i
            d = dfs[n]
            a, z = trie.tok_start.item(d), trie.tok_start.item(d + 1)
            if z > a:
                out.append(trie.tok_ids[a:z])


def _completes_after_quote(data: bytes) -> bool:
    """Whether data, read after its first quote as between items, completes an item."""
    return bool(_read(START, data, data.index(b'"') + 1, False, {})[0][0])


def _containing(trie, chars: bytes) -> np.ndarray:
    """The ids of the tokens with one of chars' bytes (down the trie's BFS levels)."""
    hit = np.zeros(trie.num_nodes + 1, dtype=bool)  # + the sentinel of tokenless ids
    wanted = np.zeros(256, dtype=bool)
    wanted[list(chars)] = True
    starts = trie.level_start
    for d in range(1, len(starts) - 1):
        lo, hi = int(starts[d]), int(starts[d + 1])
        hit[lo:hi] = hit[trie.parent[lo:hi]] | wanted[trie.byte[lo:hi]]
    return np.flatnonzero(hit[trie.token_node]).astype(np.int64)


def _levels_closed(data: bytes, in_string: bool) -> int:
    """The most levels data closes (its running depth's lowest point below 0), read from
    inside a string or not."""
    depth = low = 0
    esc = False
    for b in data:
        if esc:
            esc = False
        elif in_string:
            if b == BACKSLASH:
                esc = True
            elif b == QUOTE:
                in_string = False
        elif b == QUOTE:
            in_string = True
        elif b == OPEN_OBJ or b == OPEN_ARR:
            depth += 1
        elif b == CLOSE_OBJ or b == CLOSE:
            depth -= 1
            low = min(low, depth)
    return -low


def tables_of(info) -> ValueTables:
    t = _tables(info)
    v = getattr(t, "value_tables", None)
    if v is None:
        v = t.value_tables = ValueTables(info, t)
    return v
