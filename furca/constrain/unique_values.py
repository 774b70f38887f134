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
from bisect import bisect_left

import numpy as np

from .bitmask import allowed_ids, clear_ids, distinct
from .stacks import AutomatonLimit
from .token_tables import CLOSE, COMMA, QUOTE
from .value_reader import START, _on_used, _read
from .value_tokens import ValueTables, tables_of

VALUES = "values"  # the item language of such arrays in ir.Grammar.unique
SEARCH_BUDGET = 512  # states a dead-end search visits before it calls the prefix alive
_END = object()  # a search's find: the array closed (alive whatever was used)
_ORDER = {QUOTE: 0, 0x7D: 1, CLOSE: 2, COMMA: 3}  # the search's first bytes: those that close
_FIRST = tuple(sorted(_ORDER, key=_ORDER.get))


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
        # (state, reader) -> what a search from there found alive: the unused item its path
        # completed first, or _END (the array closed): alive again while that item is unused
        self._alive: dict = {}
        # reader -> the texts such paths spelled from it (the latest few): tried from another
        # state before a search (an array of the same items elsewhere)
        self._texts: dict = {}
        # the tokenizer's tables now (~30 ms once a process), with the compile: not in a
        # decode step's mask
        self.tables = tables_of(automaton.info)

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
        1, another member order) count as used. Past SEARCH_BUDGET rows: alive.

        A search that finds an unused item (or the array's end) keeps it (`_alive`, by
        state and reading) and the text its path spelled (`_texts`, by reading). On its
        path nothing completes before that item (a repeat ends a branch, an unused item
        ends the search), so from the same state it is alive again for any used set
        without the item. A kept text serves another state with the same reading where
        the grammar allows it there and it completes an unused item. In both cases the
        search, run, would find that path, or something alive before it, or run past its
        budget: alive. A search between items after `"},` wrote a whole new item, 12-29
        states and 166-515 µs the first time (bashly's arrays of objects)."""
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
        found = self._alive.get(key)
        if found is not None and (found is _END or found not in used):
            # the path found before completes that item first (nothing else completes on
            # it), so it is alive for any used set without the item: the search would
            # find it, or something alive before it, or run past its budget (alive)
            memo[key] = False
            return False
        reader = w[3:]
        texts = self._texts.get(reader)
        if texts is not None and any(self._spells_unused(w, s, t) for t in texts):
            memo[key] = False
            return False
        keys = self._keys
        seen, budget, dead = {key}, SEARCH_BUDGET, True
        todo = [(w, self._row_bytes(s))]  # (watch state, the row's (byte, target) left)
        path = bytearray()  # the bytes into todo[1:]
        while todo:
            v, it = todo[-1]
            nxt = next(it, None)
            if nxt is None:
                todo.pop()
                del path[len(todo) - 1:]
                continue
            b, x = nxt
            v2, _i, how = _read(v, bytes((b,)), 0, True, keys)
            if how == "repeat":
                continue
            if how == "end" or v2[0] is not used:
                dead = False  # the array closed, or an unused item completed
                if len(self._alive) >= 65536:
                    self._alive.clear()
                    self._texts.clear()
                # the item completed on the way (a bare one a `]` ends, too), else the end alone
                self._alive[key] = next(iter(v2[0] - used)) if v2[0] is not used else _END
                path.append(b)
                self._texts[reader] = (bytes(path),) + (texts or ())[:3]
                break
            k = (x, v2[3:])
            if k in seen:
                continue
            seen.add(k)
            budget -= 1
            if budget < 0:
                dead = False  # too far to tell: alive
                break
            todo.append((v2, self._row_bytes(x)))
            path.append(b)
        memo[key] = dead
        return dead

    def _spells_unused(self, w, s: int, text: bytes) -> bool:
        """Whether text, read from watch state w in state s, completes an unused item (or
        ends the array) at its last byte with no repeat before, and the grammar allows it
        from s: then a completion that is no used item exists, and the search would find
        it, or something alive before it, or run past its budget (alive). The texts are
        paths a search found from the same reading in another state (`_texts`)."""
        v2, _i, how = _read(w, text, 0, True, self._keys)
        if how != "end" and (how is not None or v2[0] is w[0]):
            return False
        try:
            return self.automaton.step(s, text) != 0
        except AutomatonLimit:  # the search decides (and meets the limit itself, or not)
            return False

    def _row_bytes(self, x: int):
        """(byte, target) of state x's row, the closing bytes first (_ORDER), then the
        others ascending: an iterator that reads the row as the search goes (most
        searches take one of the first bytes of each row they enter)."""
        a = self.automaton
        a.expand(x)
        row = a.trans[x]  # a row never changes once written (a grown table copies it)
        for b in _FIRST:
            t = row.item(b)
            if t:
                yield b, t
        for b in np.flatnonzero(row).tolist():
            if b not in _ORDER:
                yield b, row.item(b)

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
        if not cand:
            return
        # the allowed candidates (a few of the ~800-2,000 in the tables), each once, in
        # ascending order
        words = row.view(np.uint32)
        ids = distinct(np.concatenate([allowed_ids(words, c) for c in cand]))
        if not used:  # nothing used yet: only a token that writes an item twice (a comma between)
            ids = ids[t.has_comma[ids]]
        tokens = info.token_bytes
        drop = [i for i in ids.tolist() if self.blocked(w, s, tokens[i])]
        if drop:
            clear_ids(words, np.array(drop, dtype=np.int64))

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
