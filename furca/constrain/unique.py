"""uniqueItems over free strings, enforced by the matcher.

No grammar can keep an array's strings distinct (what is used so far is unbounded), so
the JSON-schema front end marks such arrays (json_schema/distinct.py: an array rule and
its item rule, items in one canonical spelling so that equal values are equal bytes;
ir.Grammar.unique, nfa.spans) and the matcher of such a grammar (`UniqueMatcher`)
watches them:

- **Which array.** A state is inside a watched array when its configurations are: an
  NFA node of the array's or the item's rule, or a top frame returning into the array
  (whitespace rules). Watching starts at the `[` after which some configuration is
  inside one (`UniqueSites.classify`), and ends at the array's `]` or when no
  configuration is inside one any more.
- **What was used.** While watching, the accepted bytes are read as the array's syntax
  (an item is `"` canonical body `"`; escapes are followed), and each completed item's
  bytes join the set of used items. The watch state is immutable and kept per accepted
  token beside the matcher's history, so rollback and fork stay O(1).
- **What is masked.** Only where every configuration is inside a watched array (else
  another reading of the same bytes, without the rule, may accept a repeat: enforcing
  there would narrow it). Inside an item whose body so far is p, a used item p + r is
  completed exactly by the tokens starting with r + `"` (found by bisection in the
  tokenizer's sorted token bytes); tokens with two or more quotes (a few hundred in a
  128k vocabulary) are read through in full (they may close one item and write
  another). With a maxLength M, a token that makes the body a used item of M
  characters is masked too (from there only the closing quote, a repeat, would
  follow: a dead end). Everything else is allowed: a string item with a character
  still free always has a completion no item used (exact unless an array holds more
  items than there are characters).
- **accept_token agrees with the mask**: a token completing a repeat is refused.

Jump-forward needs nothing: forced bytes never complete an item (a free character is a
choice), except the closing quote at maxLength, which the masking above leaves only for
bodies not used.
"""

from __future__ import annotations

import json
import threading
from bisect import bisect_right

import numpy as np

from .matcher import Matcher

QUOTE, BACKSLASH, CLOSE = 0x22, 0x5C, 0x5D

_TABLES: dict = {}  # id(TokenizerInfo) -> (info, _TokenTables)
_TABLES_LOCK = threading.Lock()


class _TokenTables:
    """A tokenizer's tokens for the watch, read off its token trie (TokenizerInfo.trie):
    the ids of the tokens with a given prefix or exact bytes (a walk down the DFS trie,
    whose subtrees hold contiguous runs of token ids), and of those with at least one /
    two quote bytes (counted down the BFS levels). A few ms for a 128k vocabulary."""

    def __init__(self, info):
        trie = self.trie = info.trie
        quotes = np.zeros(trie.num_nodes + 1, dtype=np.int32)  # + the sentinel of tokenless ids
        starts = trie.level_start
        for d in range(1, len(starts) - 1):
            lo, hi = int(starts[d]), int(starts[d + 1])
            quotes[lo:hi] = quotes[trie.parent[lo:hi]] + (trie.byte[lo:hi] == QUOTE)
        per_token = quotes[trie.token_node]
        self.one_quote = np.flatnonzero(per_token >= 1)
        self.two_quotes = np.flatnonzero(per_token >= 2)
        self.first = [None] * 256  # byte -> the root's child (the longest sibling scan)
        c, stop = 1, trie.dfs_end.item(0)
        while c < stop:
            self.first[trie.dfs_byte.item(c)] = c
            c = trie.dfs_end.item(c)

    def _node(self, data: bytes):
        """The DFS trie node of data, or None when no token starts with it."""
        if not data:
            return 0
        t = self.trie
        byte, end = t.dfs_byte, t.dfs_end
        n = self.first[data[0]]
        if n is None:
            return None
        for b in data[1:]:
            c, stop = n + 1, end.item(n)
            while c < stop:
                x = byte.item(c)
                if x >= b:
                    break
                c = end.item(c)  # the next sibling (siblings in byte order)
            if c >= stop or byte.item(c) != b:
                return None
            n = c
        return n

    def with_prefix(self, prefix: bytes) -> np.ndarray:
        """The ids of the tokens whose bytes start with prefix."""
        n = self._node(prefix)
        if n is None:
            return _NONE
        t = self.trie
        return t.tok_ids[t.tok_start.item(n):t.tok_start.item(t.dfs_end.item(n))]

    def exact(self, data: bytes) -> np.ndarray:
        """The ids of the tokens whose bytes are data."""
        n = self._node(data)
        if n is None:
            return _NONE
        t = self.trie
        return t.tok_ids[t.tok_start.item(n):t.tok_start.item(n + 1)]


_NONE = np.zeros(0, dtype=np.int32)


def _tables(info) -> _TokenTables:
    hit = _TABLES.get(id(info))
    if hit is not None and hit[0] is info:
        return hit[1]
    with _TABLES_LOCK:
        hit = _TABLES.get(id(info))
        if hit is None or hit[0] is not info:
            if len(_TABLES) >= 8:
                _TABLES.clear()
            hit = _TABLES[id(info)] = (info, _TokenTables(info))
    return hit[1]


class UniqueSites:
    """The watched arrays of one compiled grammar: which states lie inside them, and the
    tokens a watch state masks. Shared by the grammar's matchers (its caches only grow,
    with values computed alike by any thread)."""

    def __init__(self, automaton):
        self.automaton = automaton
        nfa = automaton.nfa
        spans = []  # (start, end, maxLength)
        for array, (item, _lo, hi) in nfa.unique.items():
            for name in (array, item):
                if name in nfa.spans:
                    spans.append((*nfa.spans[name], hi))
        spans.sort()
        self._starts = [s for s, _e, _m in spans]
        self._spans = spans
        self._classes: dict[int, tuple] = {}  # state -> (any inside, all inside, maxLengths)
        self._lengths: dict[bytes, int] = {}  # a used item's body -> its characters
        self._tables = None

    @property
    def tables(self) -> _TokenTables:
        if self._tables is None:
            self._tables = _tables(self.automaton.info)
        return self._tables

    def _site(self, node):
        """(True, maxLength) when node lies in a watched rule, else None."""
        i = bisect_right(self._starts, node) - 1
        if i >= 0:
            start, end, hi = self._spans[i]
            if node < end:
                return (True, hi)
        return None

    def classify(self, s: int) -> tuple:
        """(some configuration inside a watched array, all are, their maxLengths)."""
        hit = self._classes.get(s)
        if hit is None:
            a = self.automaton
            frames = a.stacks.frames
            some, every, lengths = False, True, set()
            for node, st in a.configs[s]:
                site = self._site(node)
                if site is None and st:
                    site = self._site(frames[st][0])
                if site is None:
                    every = False
                else:
                    some = True
                    if site[1] is not None:
                        lengths.add(site[1])
            hit = self._classes[s] = (some, some and every, frozenset(lengths))
        return hit

    def length(self, body: bytes) -> int:
        """The characters of a canonical item body."""
        n = self._lengths.get(body)
        if n is None:
            n = self._lengths[body] = len(json.loads(b'"' + body + b'"'))
        return n

    # ---- the watch ---------------------------------------------------------------
    def advance(self, w, s0: int, data: bytes, s1: int):
        """The watch state after data (accepted from state s0 into s1). w: None (not
        watching) or (used items, body so far or None between items, inside an escape)."""
        i, n = 0, len(data)
        while i < n:
            if w is None:
                j = data.find(b"[", i)
                if j < 0:
                    break
                i = j + 1
                if self.classify(self.automaton.step(s0, data[:i]))[0]:
                    w = (frozenset(), None, False)
                continue
            used, cur, esc = w
            if cur is None:
                q = data.find(b'"', i)
                c = data.find(b"]", i)
                if 0 <= c and (q < 0 or c < q):  # the array ends
                    w, i = None, c + 1
                    continue
                if q < 0:
                    break
                w, i = (used, b"", False), q + 1
                continue
            while i < n:
                b = data[i]
                i += 1
                if esc:
                    esc = False
                elif b == BACKSLASH:
                    esc = True
                elif b == QUOTE:
                    used = used | {cur}
                    cur = None
                    break
                cur += data[i - 1:i]
            w = (used, cur, esc)
        if w is not None and not self.classify(s1)[0]:
            w = None  # the reading that watched died (another one went on)
        return w

    def repeats(self, w, data: bytes, lengths) -> bool:
        """Whether data, read from watch state w inside an array, completes a used item
        (or one written earlier in data), or leaves a used body of a maxLength in
        `lengths`, from which only its closing quote would follow."""
        used, cur, esc = w
        for i in range(len(data)):
            b = data[i]
            if cur is None:
                if b == QUOTE:
                    cur, esc = b"", False
                elif b == CLOSE:
                    return False
                continue
            if esc:
                esc = False
            elif b == BACKSLASH:
                esc = True
            elif b == QUOTE:
                if cur in used:
                    return True
                used, cur = used | {cur}, None
                continue
            cur += data[i:i + 1]
        return cur is not None and bool(lengths) and cur in used and self.length(cur) in lengths

    def masked(self, w, s: int, row: np.ndarray) -> None:
        """Clears, in row (the grammar's mask of state s, int32 words), the tokens that
        complete a repeat from watch state w (see the module docstring)."""
        _some, every, lengths = self.classify(s)
        if not every:
            return
        used, cur, _esc = w
        t = self.tables
        out = []
        dead = bool(lengths) and any(self.length(x) in lengths for x in used)
        if cur is not None:
            for x in used:
                if x.startswith(cur):
                    r = x[len(cur):]
                    out.append(t.with_prefix(r + b'"'))  # r empty: the body is x now, its quote masked
                    if r and lengths and self.length(x) in lengths:
                        out.append(t.exact(r))
            cand = t.two_quotes
        else:
            cand = t.one_quote if dead else t.two_quotes
        words = row.view(np.uint32)
        bits = (words[cand >> 5] >> (cand & 31).astype(np.uint32)) & 1
        token_bytes = self.automaton.info.token_bytes
        read = [i for i in cand[bits.astype(bool)].tolist() if self.repeats(w, token_bytes[i], lengths)]
        if read:
            out.append(np.array(read, dtype=np.int64))
        if not out:
            return
        ids = np.concatenate(out)
        if len(ids):
            np.bitwise_and.at(words, ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))


class UniqueMatcher(Matcher):
    """A Matcher of a grammar with watched arrays (see the module docstring): the same
    API; the mask and accept_token also keep each watched array's strings distinct."""

    __slots__ = ("_u", "_w")

    def __init__(self, grammar, _hist=None, _watch=None):
        super().__init__(grammar, _hist)
        self._u = grammar.unique_sites
        self._w = _watch if _watch is not None else (None, None)  # (watch state, the node before)

    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        super().fill_bitmask(bitmask, row)
        w = self._w[0]
        if w is not None and self.error is None and not self._t[1]:
            out = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()
            self._u.masked(w, self._t[0], out[row])

    def _refused(self, w, data) -> bool:
        """Whether data, accepted now inside a watched array (w), would complete a repeat
        (then the matcher fails)."""
        if not data or self.error is not None or self._t[1]:
            return False
        _some, every, lengths = self._u.classify(self._t[0])
        if every and self._u.repeats(w, data, lengths):
            self._fail(f"{data!r} would repeat an item of an array whose items must be unique")
            return True
        return False

    def _moved(self, w, data, h0) -> None:
        """Pushes the watch state after data (accepted from history node h0)."""
        h1 = self._t
        if data and not h1[1] and (w is not None or b"[" in data):
            w = self._u.advance(w, h0[0], data, h1[0])
        self._w = (w, self._w)

    def accept_token(self, token_id: int) -> bool:
        w = self._w[0]
        tokens = self._tokens
        data = tokens[token_id] if 0 <= token_id < len(tokens) else None
        if w is not None and self._refused(w, data):
            return False
        h0 = self._t
        if not Matcher.accept_token(self, token_id):
            return False
        self._moved(w, data, h0)
        return True

    def accept_string(self, text) -> bool:
        w = self._w[0]
        data = text.encode("utf-8") if isinstance(text, str) else text
        if w is not None and self._refused(w, data):
            return False
        h0 = self._t
        if not Matcher.accept_string(self, data):
            return False
        self._moved(w, data, h0)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        super().rollback(num_tokens)
        w = self._w
        for _ in range(num_tokens):
            w = w[1]
        self._w = w

    def reset(self) -> None:
        super().reset()
        w = self._w
        while w[1] is not None:
            w = w[1]
        self._w = w

    def fork(self) -> "UniqueMatcher":
        m = UniqueMatcher(self._g, self._t, self._w)
        m.error = self.error
        return m
