"""uniqueItems over any items (objects, arrays, numbers, mixed types), kept by the matcher.

unique.py keeps strings and integers distinct by their canonical bytes. Items of other
kinds (objects, arrays, numbers, anyOf of several types, any value) have many spellings
of one value (`1` and `1.0`, members in another order, whitespace, escapes), so this
watch compares values, as JSON Schema does: json_schema/distinct.py registers the array
rule and its item rule (ir.Grammar.unique with the language `VALUES`), and the matcher
(`UniqueMatcher`, beside the other watches) reads the accepted bytes as the array's items.

- **Which array.** A configuration is inside a watched array when its node or any frame
  of its stack lies in the array's or the item's rule (an item's objects, strings and
  numbers are calls of other rules; the array calls its item, never in tail position).
  Watching starts at a `[` after which some configuration is inside one, and ends at its
  `]` or when none is. They nest: one reader per open array (outermost first); a
  configuration's level is the number of its frames returning after an item call, plus
  one between items, and a reader applies where every configuration's level reaches it.
- **What was used.** Each completed item's text (a string or container closed at the
  item's level, a bare number or literal ended by `,` `]` or whitespace) becomes its
  value's key (`value_key`: numbers as Decimals, so 1 == 1.0; booleans apart from
  numbers; members unordered). The texts are kept too, whitespace outside strings
  dropped, for the dead ends. The watch state is immutable, one per accepted token.
- **What is masked** (where every configuration is inside): a token that completes an
  item equal to a used one (or to one earlier in the token), and a token after which
  every completion of the item is a used one (a dead end). Candidates, read through
  (`blocked`) where the grammar allows them: the tokens that may complete the item from
  the reader's position (by how many levels they close from inside or outside a string,
  per tokenizer; a string item: the canonical spelling of each used value's rest plus
  the quote, and the tokens with a quote and a backslash), and the tokens that end along
  a used item's text. A dead end is found by a search through the automaton's rows
  along the used texts: a byte the grammar allows that leaves every used text leads to
  an unused value, so the prefix is alive. Exact where the grammar spells each value
  one way; items that can respell a used value in another member order or number
  spelling (additionalProperties, 1.0) are exact for repeats, and a dead end reachable
  only through such respellings is not found. The search stops (alive) past
  SEARCH_BUDGET rows.
- **accept_token agrees with the mask**: it refuses what `blocked` finds.
"""
from __future__ import annotations

import json
from bisect import bisect_left, insort
from decimal import Decimal

import numpy as np

from .unique import _NONE, BACKSLASH, CLOSE, COMMA, QUOTE, _tables, advance_watch

VALUES = "values"  # the item language of such arrays in ir.Grammar.unique
OPEN_OBJ, CLOSE_OBJ, OPEN_ARR = 0x7B, 0x7D, 0x5B
_WS = frozenset(b" \t\n\r")
SEARCH_BUDGET = 512  # states a dead-end search visits before it calls the prefix alive
_ORDER = {QUOTE: 0, 0x7D: 1, CLOSE: 2, COMMA: 3}  # the search's first bytes: those that close


def value_key(text: bytes):
    """A hashable key of the JSON value text spells, equal for equal values in JSON
    Schema's sense (numbers by value, true apart from 1, members in any order)."""
    return _key(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def _key(v):
    if isinstance(v, dict):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, Decimal):  # Decimal("1.0") == Decimal("1"), equal hashes
        return ("x", v)
    if isinstance(v, str):
        return ("s", v)
    return ("l", v)  # true, false, null


class ValueTables:
    """A tokenizer's tokens for this watch (built once, kept on unique.py's tables): by the
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


def _tables_of(info) -> ValueTables:
    t = _tables(info)
    v = getattr(t, "value_tables", None)
    if v is None:
        v = t.value_tables = ValueTables(info, t)
    return v


# ---- the reader ------------------------------------------------------------------
# A watch state: (used keys, the used texts without whitespace outside strings (sorted),
# the item's text so far or None between items, that text without such whitespace, its
# open levels, inside a string, after a backslash, a bare item, after a comma).
START = (frozenset(), (), None, b"", 0, False, False, False, False)


def _read(w, data: bytes, i: int, stop: bool, keys: dict):
    """Reads data[i:] as the array's items from watch state w: (state, position, how):
    how "end" when the array closed (position past its `]`), "repeat" when an item
    completed a used one (only with stop), None when data was read whole. keys: a cache
    of value_key by text."""
    used, norms, cur, norm, depth, ins, esc, bare, comma = w
    n = len(data)
    while i < n:
        b = data[i]
        one = data[i:i + 1]
        i += 1
        if cur is None:
            if b in _WS:
                continue
            if b == CLOSE:
                return (used, norms, None, b"", 0, False, False, False, comma), i, "end"
            if b == COMMA:
                comma = True
                continue
            cur = norm = one
            comma = esc = False
            ins, depth, bare = (True, 0, False) if b == QUOTE else (False, 1, False) if b in b"{[" else (
                False, 0, True)
            continue
        if bare:
            if not (b == COMMA or b == CLOSE or b in _WS):
                cur += one
                norm += one
                continue
        elif esc:
            esc = False
            cur += one
            norm += one
            continue
        elif ins:
            if b == BACKSLASH:
                esc = True
            elif b == QUOTE:
                ins = False
            cur += one
            norm += one
            if ins or depth:
                continue
        else:
            cur += one
            if b in _WS:
                continue
            norm += one
            if b == QUOTE:
                ins = True
            elif b == OPEN_OBJ or b == OPEN_ARR:
                depth += 1
            elif b == CLOSE_OBJ or b == CLOSE:
                depth -= 1
            if depth:
                continue
        # an item completed: cur (a bare one before the delimiter b)
        k = keys.get(cur)
        if k is None:
            try:
                k = value_key(cur)
            except ValueError:  # not JSON (a grammar never writes it): never a repeat
                k = ("?", cur)
            if len(keys) >= 4096:
                keys.clear()
            keys[cur] = k
        if k in used:
            if stop:
                return (used, norms, cur, norm, depth, ins, esc, bare, comma), i, "repeat"
        else:
            used = used | {k}
            lst = list(norms)
            insort(lst, norm)
            norms = tuple(lst)
        cur, norm, depth, ins, esc = None, b"", 0, False, False
        if bare:
            bare = False
            if b == CLOSE:
                return (used, norms, None, b"", 0, False, False, False, False), i, "end"
            comma = b == COMMA
    return (used, norms, cur, norm, depth, ins, esc, bare, comma), i, None


def _on_used(norms, norm: bytes) -> bool:
    """Whether norm is a prefix of a used item's text."""
    i = bisect_left(norms, norm)
    return i < len(norms) and norms[i].startswith(norm)


class ValueSites:
    """The arrays of one compiled grammar whose items are compared as values: which states
    lie inside them, and the tokens a watch state masks."""

    def __init__(self, automaton):
        self.automaton = automaton
        nfa = automaton.nfa
        arrays = {a: v[0] for a, v in nfa.unique.items() if v[-1] == VALUES}
        self._spans = sorted(nfa.spans[a] for a in arrays if a in nfa.spans)
        self._starts = [x[0] for x in self._spans]
        # the return nodes of the arrays' calls of their items: a frame returning to one is
        # an item open in a watched array
        items = {nfa.rule_start[i] for i in arrays.values() if i in nfa.rule_start}
        self._item_rets = frozenset(r for c, (start, r) in nfa.call.items() if start in items and self._in(c))
        self._classes: dict[int, tuple] = {}  # state -> (deepest array level, shallowest)
        self._keys: dict[bytes, tuple] = {}  # item text -> value_key
        self._memo: dict = {}  # (used keys) -> {(state, reader): dead}
        self._rows: dict[int, list] = {}  # state -> its row's (byte, target), closing bytes first
        # the tokenizer's tables now (~30 ms once a process), with the compile: not in a
        # decode step's mask
        self.tables = _tables_of(automaton.info)

    def _in(self, node: int) -> bool:
        """Whether node lies in a watched array's rule."""
        i = bisect_left(self._starts, node + 1) - 1
        return i >= 0 and node < self._spans[i][1]

    def classify(self, s: int) -> tuple:
        """(the most watched arrays a configuration of s is inside, the fewest): a
        configuration's count is its stack's frames returning after an item call, plus
        one where it is between items (its node, or a frame above those, in an array's
        rule)."""
        hit = self._classes.get(s)
        if hit is None:
            a = self.automaton
            frames, rets = a.stacks.frames, self._item_rets
            most, fewest = 0, None
            for node, st in a.configs[s]:
                k, at = 0, self._in(node)
                top = not at
                while st > 0:
                    ret, st, _count = frames[st]
                    if ret in rets:
                        k += 1
                        top = False
                    elif top and ret >= 0 and self._in(ret):
                        at, top = True, False
                k += at
                most = max(most, k)
                fewest = k if fewest is None else min(fewest, k)
            hit = self._classes[s] = (most, fewest or 0)
        return hit

    # ---- the watch ---------------------------------------------------------------
    # The watch state of a matcher: None, or a tuple of reader states, one per watched
    # array open (outermost first); each reads every byte from its array's `[` to its `]`.
    def advance(self, ws, s0: int, data: bytes, s1: int):
        """The watch state after data (accepted from state s0 into s1)."""
        ws, keys, i, n = ws or (), self._keys, 0, len(data)
        while i < n:
            j = data.find(b"[", i)
            end = n if j < 0 else j + 1
            if ws:
                inner, stop, how = _read(ws[-1], data[:end], i, False, keys)
                if how == "end":  # the innermost array closed at stop: the outer ones read up to there
                    ws = tuple(_read(f, data[:stop], i, False, keys)[0] for f in ws[:-1])
                    i = stop
                    continue
                ws = tuple(_read(f, data[:end], i, False, keys)[0] for f in ws[:-1]) + (inner,)
            i = end
            if j >= 0 and self.classify(self.automaton.step(s0, data[:i]))[0] > len(ws):
                ws = ws + (START,)  # a watched array opened
        most = self.classify(s1)[0]
        if len(ws) > most:
            ws = ws[:most]  # the readings that watched died
        return ws or None

    def blocked_any(self, ws, s: int, data: bytes) -> bool:
        """Whether data, accepted in state s, repeats an item or reaches a dead end in one
        of the watched arrays every configuration of s is inside."""
        fewest = self.classify(s)[1]
        return any(self.blocked(w, s, data) for w in ws[:fewest])

    def blocked(self, w, s: int, data: bytes) -> bool:
        """Whether data, read from watch state w in state s (inside a watched array),
        completes a used item or stops where every completion of the item is used."""
        w2, _i, how = _read(w, data, 0, True, self._keys)
        if how is not None:
            return how == "repeat"
        used, norms, cur, norm = w2[0], w2[1], w2[2], w2[3]
        if not used or (cur is not None and not _on_used(norms, norm)):
            return False
        t = self.automaton.step(s, data)
        return t != 0 and self._dead(w2, t)

    def _dead(self, w, s: int) -> bool:
        """Whether every completion of the item from state s (watch state w: inside an item,
        or between items) is a used item: a depth-first search through the automaton's
        rows for an unused completed item (or the array's `]`), closing bytes first, so
        that a free value completes in a few bytes. Respellings of a used value (1.0 for
        1, another member order) count as used. Past SEARCH_BUDGET rows: alive."""
        used = w[0]
        memo = self._memo.get(used)
        if memo is None:
            if len(self._memo) >= 8:
                self._memo.clear()
            memo = self._memo[used] = {}
        key = (s, w[3:])  # the text without whitespace (and the reader's flags): whitespace
        hit = memo.get(key)  # variants that reach one state are one search node
        if hit is not None:
            return hit
        keys = self._keys
        seen, budget, dead = {key}, SEARCH_BUDGET, True
        todo = [(w, iter(self._row_bytes(s)))]  # (watch state, the row's (byte, target) left)
        while todo:
            v, it = todo[-1]
            nxt = next(it, None)
            if nxt is None:
                todo.pop()
                continue
            b, x = nxt
            v2, _i, how = _read(v, bytes((b,)), 0, True, keys)
            if how == "repeat":
                continue
            if how == "end" or v2[0] is not used:
                dead = False  # the array closed, or an unused item completed
                break
            k = (x, v2[3:])
            if k in seen:
                continue
            seen.add(k)
            budget -= 1
            if budget < 0:
                dead = False  # too far to tell: alive
                break
            todo.append((v2, iter(self._row_bytes(x))))
        memo[key] = dead
        return dead

    def _row_bytes(self, x: int) -> list:
        """[(byte, target)] of state x's row, the closing bytes first (cached per state)."""
        hit = self._rows.get(x)
        if hit is None:
            a = self.automaton
            a.expand(x)
            row = a.trans[x]
            hit = sorted(((b, row.item(b)) for b in np.flatnonzero(row).tolist()), key=lambda y: _ORDER.get(y[0], 9))
            if len(self._rows) >= 65536:
                self._rows.clear()
            self._rows[x] = hit
        return hit

    def masked(self, ws, s: int, row: np.ndarray) -> None:
        """Clears, in row (the grammar's mask of state s, int32 words), the tokens that
        complete a used item or reach a dead end in a watched array every configuration
        of s is inside (watch state ws)."""
        for w in ws[:self.classify(s)[1]]:
            self._masked(w, s, row)

    def _masked(self, w, s: int, row: np.ndarray) -> None:
        info = self.automaton.info
        t = self.tables
        used, norms, cur, norm, depth, ins, esc, bare, comma = w
        cand = []
        if cur is None:
            cand.append(t.between)
            for u in norms:
                t.along(u, cand)
                if not comma:
                    t.along(b"," + u, cand)
        else:
            if bare:
                cand.append(t.delims)
                cand.append(t.with_ws())
            elif esc:
                cand.append(t.t.one_quote)
            elif ins and depth == 0:
                self._string_rest(used, cur, t, cand)
            else:
                cand.append(t.closing(ins, depth))
            lo = bisect_left(norms, norm)
            k = len(norm)
            for u in norms[lo:]:
                if not u.startswith(norm):
                    break
                t.along(u[k:], cand)
        ids = np.unique(np.concatenate(cand)) if cand else _NONE
        if not used:  # nothing used yet: only a token that writes an item twice (a comma between)
            ids = np.intersect1d(ids, t.t.comma, assume_unique=True)
        if not len(ids):
            return
        words = row.view(np.uint32)
        bits = (words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1
        tokens = info.token_bytes
        drop = [i for i in ids[bits.astype(bool)].tolist() if self.blocked(w, s, tokens[i])]
        if drop:
            d = np.array(drop, dtype=np.int64)
            np.bitwise_and.at(words, d >> 5, ~(np.uint32(1) << (d & 31).astype(np.uint32)))

    def _string_rest(self, used, cur: bytes, t: ValueTables, cand: list) -> None:
        """Candidates inside a string item: for each used string that starts with the text
        so far, the tokens starting with its rest (canonical spelling) and the quote; the
        tokens with a quote and a backslash (another spelling); every token with a quote
        when the text so far stops inside an escape."""
        try:
            so_far = json.loads(cur + b'"')
        except ValueError:  # inside a \\u escape
            cand.append(t.t.one_quote)
            return
        cand.append(t.quote_escape)
        cand.append(t.close_then_item)
        for k in used:
            if k[0] == "s" and k[1].startswith(so_far):
                rest = json.dumps(k[1][len(so_far):], ensure_ascii=False)[1:-1]
                try:
                    cand.append(t.t.with_prefix(rest.encode("utf-8") + b'"'))
                except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text writes it
                    continue
