"""uniqueItems over strings, enforced by the matcher.

No grammar can keep an array's strings distinct (what is used so far is unbounded), so
the JSON-schema front end marks such arrays (json_schema/distinct.py: an array rule and
its item rule, items in one canonical spelling so that equal values are equal bytes;
ir.Grammar.unique, nfa.spans) and the matcher of such a grammar (`UniqueMatcher`)
watches them. Item languages (`Items`): free strings (maxLength or none), a finite
list of values (a string enum too long for the grammar's own sets), or integers (bare
items, ended by the `,` or `]` after them; `0` the only body that cannot go on).

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
  there would narrow it). A token is masked when it completes a used item or stops
  where every completion is a used item (a dead end: `blocked`). Inside an item whose
  body so far is p, a used item p + r is completed exactly by the tokens starting with
  r + `"`; a dead body q (the shortest ones along the used items, `Items.dead_nodes`:
  free strings only a used body of maxLength characters, finite lists a body all of
  whose values are used) is reached exactly by the tokens starting with q's rest: one
  lookup each in the token trie, whose DFS subtrees are runs of token ids. The tokens
  with two or more quotes (230 of Llama-3.1's 128k), and for finite lists those with a
  quote and a comma (a comma once every value is used is a dead end), are read through
  whole; between items, the tokens that open an item (when some body is dead) or write a
  comma (when every value is used). A free string with a character still free always
  has a completion no item used (exact unless an array holds more items than there are
  characters).
- **accept_token agrees with the mask**: it refuses what `blocked` masks.

Jump-forward needs nothing: forced bytes are the only continuation, and a body whose only
completion is used is dead, so never reached.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right

import numpy as np

from .bitmask import allowed_ids, clear_ids, distinct
from .matcher import Matcher
from .stacks import AutomatonLimit
from .token_tables import BACKSLASH, CLOSE, COMMA, QUOTE, _TokenTables, _tables


class Items:
    """The item language of a watched array: free strings (max_len: maxLength or None)
    or a finite list of canonical spellings (values, sorted bytes; enum items)."""

    __slots__ = ("max_len", "values", "bare", "_value_set")

    def __init__(self, max_len, values, bare=False):
        self.max_len = max_len
        self.values = None if values is None else sorted(values)
        self._value_set = None if values is None else frozenset(values)
        self.bare = bare  # integers: no quotes, ended by a delimiter

    def dead_nodes(self, used, length, min_len=0) -> set:
        """The shortest item bodies every completion of which is a used item (a body
        extending one of them is dead too), along the used items. min_len 1: the
        shortest non-empty ones, and the empty body too when every value is used (an
        object's keys: where another reading of the key may live, the non-empty ones say
        which key bodies only used names complete)."""
        out = set()
        if self.bare:  # integers: only 0 cannot go on (no -0, no leading zero)
            if b"0" in used:
                out.add(b"0")
            return out
        if self.values is None:  # free strings: only a used body at maxLength
            if self.max_len is not None:
                out.update(u for u in used if length(u) == self.max_len)
            return out
        v = self.values
        used = [u for u in used if u in self._value_set]  # an object's used keys may be a pattern's
        u_sorted = sorted(used)
        if min_len and len(used) == len(v):
            out.add(b"")
        for u in used:
            for j in range(min_len, len(u) + 1):
                q, q_end = u[:j], u[:j] + b"\xff"  # UTF-8 has no 0xFF byte: the prefix's end
                if bisect_left(v, q_end) - bisect_left(v, q) <= bisect_left(u_sorted, q_end) - bisect_left(u_sorted, q):
                    out.add(q)
                    break
        return out


class _Dead:
    """The dead bodies of one set of used items under the item languages of a state:
    dead in every language. `nodes`: the shortest ones (masking the tokens that reach
    one masks everything past it)."""

    __slots__ = ("nodes", "per_lang")

    def __init__(self, langs, used, length, min_len=0):
        self.per_lang = [x.dead_nodes(used, length, min_len) for x in langs]
        union = set().union(*self.per_lang)
        self.nodes = {q for q in union if self.dead(q)}

    def dead(self, body: bytes) -> bool:
        for nodes in self.per_lang:
            if not nodes or not any(body[:j] in nodes for j in range(len(body) + 1)):
                return False
        return True


class Watched:
    """What the watches of a compiled grammar share (UniqueSites here, members.py's
    ObjectSites): the NFA node ranges of the watched rules, each with the Items of its
    array or object, and the dead bodies of sets of used items. Shared by the grammar's
    matchers (its caches only grow, with values computed alike by any thread)."""

    def __init__(self, automaton, spans, length, min_len=0):
        """spans: [(first node, end node, Items)] of the watched rules; length(body): the
        characters of an item body (for maxLength); min_len: Items.dead_nodes'."""
        self.automaton = automaton
        spans.sort(key=lambda x: x[0])
        self._starts = [x[0] for x in spans]
        self._spans = spans
        self._length = length
        self._min_len = min_len
        self._dead_cache: dict[tuple, _Dead] = {}  # (item languages, used items) -> _Dead

    def _site(self, node):
        """The Items of the watched rule node lies in, or None."""
        i = bisect_right(self._starts, node) - 1
        if i >= 0:
            start, end, items = self._spans[i]
            if node < end:
                return items
        return None

    def _dead(self, langs, used) -> _Dead:
        """The dead bodies of used under langs (cached: one computation per item written)."""
        key = (langs, used)
        hit = self._dead_cache.get(key)
        if hit is None:
            if len(self._dead_cache) >= 256:
                self._dead_cache.clear()
            hit = self._dead_cache[key] = _Dead(langs, used, self._length, self._min_len)
        return hit


class UniqueSites(Watched):
    """The watched arrays of one compiled grammar: which states lie inside them, and the
    tokens a watch state masks."""

    def __init__(self, automaton):
        nfa = automaton.nfa
        spans = []  # (start, end, Items)
        for array, (item, _lo, hi, values, bare) in nfa.unique.items():
            if bare == "values":  # compared as values: unique_values.py
                continue
            items = Items(hi, values, bare)
            for name in (array, item):
                if name in nfa.spans:
                    spans.append((*nfa.spans[name], items))
        super().__init__(automaton, spans, self.length)
        _tables(automaton.info)  # the tokenizer's tables now, with the compile: not in a decode step's mask
        self._classes: dict[int, tuple] = {}  # state -> (any inside, all inside, item languages)
        self._lengths: dict[bytes, int] = {}  # a used item's body -> its characters

    @property
    def tables(self) -> _TokenTables:
        return _tables(self.automaton.info)

    def classify(self, s: int) -> tuple:
        """(some configuration inside a watched array, all are, their item languages)."""
        hit = self._classes.get(s)
        if hit is None:
            a = self.automaton
            frames = a.stacks.frames
            some, every, langs = False, True, set()
            for node, st in a.configs[s]:
                site = self._site(node)
                if site is None and st:
                    site = self._site(frames[st][0])
                if site is None:
                    every = False
                else:
                    some = True
                    langs.add(site)
            hit = self._classes[s] = (some, some and every, tuple(langs))
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
        watching) or (used items, body so far or None between items, inside an escape,
        after a comma: an item must follow, the item is bare: an integer)."""
        i, n = 0, len(data)
        while i < n:
            if w is None:
                j = data.find(b"[", i)
                if j < 0:
                    break
                i = j + 1
                if self.classify(self.automaton.step(s0, data[:i]))[0]:
                    w = (frozenset(), None, False, False, False)
                continue
            w, i, how = _read(w, data, i, False)
            if how == "end":
                w = None
        if w is not None and not self.classify(s1)[0]:
            w = None  # the reading that watched died (another one went on)
        return w

    def blocked(self, w, data: bytes, langs) -> bool:
        """Whether data, read from watch state w inside an array, completes a used item
        (or one written earlier in data), or stops where every completion is a used item
        (a dead end: inside an item, or after a comma with every item used)."""
        w, _i, how = _read(w, data, 0, True)
        if how is not None:
            return how == "repeat"
        used, cur, _esc, comma, _bare = w
        if not used:
            return False
        if cur is not None:
            return self._dead(langs, used).dead(cur)
        return comma and self._dead(langs, used).dead(b"")

    def masked(self, w, s: int, row: np.ndarray) -> None:
        """Clears, in row (the grammar's mask of state s, int32 words), the tokens that
        complete a repeat or reach a dead end from watch state w (see the module
        docstring)."""
        _some, every, langs = self.classify(s)
        used, cur, _esc, comma, bare = w
        if not every:
            return
        t = self.tables
        out = []

        def lookup(prefix):
            ids = t.with_prefix(prefix)
            if len(ids):
                out.append(ids)

        dead = self._dead(langs, used) if used else None
        if cur is not None:
            k = len(cur)
            ends = _BARE_ENDS if bare else (b'"',)
            for u in used:
                if u.startswith(cur):  # u == cur: the body is u now, its end masked
                    for e in ends:
                        lookup(u[k:] + e)
            for q in dead.nodes if dead is not None else ():
                if len(q) > k and q.startswith(cur):
                    lookup(q[k:])
            if bare:  # past a delimiter: another item
                cand = t.comma
            elif any(x.values is not None for x in langs):
                cand = t.closing
            elif any(x.max_len is not None for x in langs):  # past the quote: a dead body of maxLength
                cand = t.two_quotes
            else:  # free strings without maxLength: past this item's quote, a repeat needs two more quotes
                cand = t.three_quotes
        else:  # tokens opening an item: read through those that may reach a dead body
            cand = t.one_quote if dead is not None and dead.nodes else t.two_quotes
            if not comma and dead is not None and b"" in dead.nodes:  # every item used: no comma
                cand = distinct(np.concatenate((cand, t.comma)))
            if any(x.bare for x in langs):  # an integer opens at the token's start (compact)
                for u in used:
                    for e in _BARE_ENDS:
                        lookup(u + e)
                for q in dead.nodes if dead is not None else ():
                    lookup(q)
                cand = distinct(np.concatenate((cand, t.comma)))
        words = row.view(np.uint32)
        token_bytes = self.automaton.info.token_bytes
        read = [i for i in allowed_ids(words, cand).tolist() if self.blocked(w, token_bytes[i], langs)]
        if read:
            out.append(np.array(read, dtype=np.int64))
        if out:
            ids = np.concatenate(out) if len(out) > 1 else out[0]
            clear_ids(words, ids)


_WS = b" \t\n\r"
_BARE_ENDS = (b",", b"]")  # what ends an integer item (compact whitespace only: distinct.py)


def _read(w, data: bytes, i: int, stop_on_repeat: bool):
    """Reads data[i:] as a watched array's syntax from watch state w: (state, position,
    how): how "end" when the array closed (position past its `]`), "repeat" when an item
    completed a used one (only with stop_on_repeat), None when data was read whole.
    Items: `"` body `"` (escapes followed), or bare (an integer) ended by `,` / `]` /
    whitespace."""
    used, cur, esc, comma, bare = w
    n = len(data)
    while i < n:
        b = data[i]
        i += 1
        if cur is None:
            if b == QUOTE:
                cur, esc, comma, bare = b"", False, False, False
            elif b == CLOSE:
                return (used, None, False, comma, False), i, "end"
            elif b == COMMA:
                comma = True
            elif b not in _WS:
                cur, comma, bare = data[i - 1:i], False, True
            continue
        if bare:
            if b == COMMA or b == CLOSE or b in _WS:
                if stop_on_repeat and cur in used:
                    return (used, cur, esc, comma, bare), i, "repeat"
                used, cur, bare = used | {cur}, None, False
                if b == CLOSE:
                    return (used, None, False, comma, False), i, "end"
                comma = b == COMMA
                continue
        elif esc:
            esc = False
        elif b == BACKSLASH:
            esc = True
        elif b == QUOTE:
            if stop_on_repeat and cur in used:
                return (used, cur, esc, comma, bare), i, "repeat"
            used, cur = used | {cur}, None
            continue
        cur += data[i - 1:i]
    return (used, cur, esc, comma, bare), i, None


class UniqueMatcher(Matcher):
    """A Matcher of a grammar with watched arrays or objects (see the module docstring
    and members.py): the same API; the mask and accept_token also keep each watched
    array's items, and each watched object's keys, distinct."""

    __slots__ = ("_u", "_os", "_vs", "_w")

    def __init__(self, grammar, _hist=None, _watch=None):
        super().__init__(grammar, _hist)
        self._u = grammar.unique_sites
        self._os = grammar.object_sites
        self._vs = grammar.value_sites
        # (array watch state, object watch state, value-array watch state, the node before)
        self._w = _watch if _watch is not None else (None, None, None, None)

    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        super().fill_bitmask(bitmask, row)
        w, o, v, _ = self._w
        if self.error is None and not self._t[1] and (w is not None or v is not None or self._os is not None):
            out = (bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy())[row]
            try:
                if w is not None:
                    self._u.masked(w, self._t[0], out)
                if v is not None:
                    self._vs.masked(v, self._t[0], out)
                if o is not None:
                    self._os.masked(o, self._t[0], out)
                elif self._os is not None:
                    self._os.masked_outside(self._t[0], out)
            except AutomatonLimit as e:  # the watch stepped a token into a state past a limit
                self._fail(f"grammar limit reached: {e}")
                n = self._n
                out[:n] = self._a.info.eos_mask  # the error state's mask, as Matcher writes it
                out[n:] = 0

    def _refused(self, data) -> bool:
        """Whether data, accepted now, would repeat an item of a watched array (then the
        matcher fails)."""
        w, _o, v, _ = self._w
        if (w is None and v is None) or not data or self.error is not None or self._t[1]:
            return False
        s = self._t[0]
        if w is not None:
            _some, every, langs = self._u.classify(s)
            if every and self._u.blocked(w, data, langs):
                self._fail(f"{data!r} would repeat an item of an array whose items must be unique")
                return True
        if v is not None and self._vs.blocked_any(v, s, data):
            self._fail(f"{data!r} would repeat an item of an array whose items must be unique "
                       "(or leave only used items to complete)")
            return True
        return False

    def accept_token(self, token_id: int) -> bool:
        return self._accept(self._token_data(token_id), Matcher.accept_token, token_id)

    def accept_string(self, text) -> bool:
        data = text.encode("utf-8") if isinstance(text, str) else text
        return self._accept(data, Matcher.accept_string, data)

    def _accept(self, data, step, arg) -> bool:
        """step(self, arg) (Matcher's own accept of data's bytes), refused when it would
        repeat; the watch states after it pushed beside the history. The watches step the
        automaton too: a grammar limit met there refuses the token as Matcher's own step
        does (the error state, the matcher not moved)."""
        h0 = self._t
        try:
            return self._accept_watched(data, step, arg)
        except AutomatonLimit as e:
            self._t = h0
            self._fail(f"grammar limit reached: {e}")
            return False

    def _accept_watched(self, data, step, arg) -> bool:
        if self._refused(data):
            return False
        w, o, v, _ = self._w
        h0 = self._t
        watch = self._os is not None and data and self.error is None and not h0[1] and (o is not None or b"{" in data)
        if watch:
            o, refused = self._os.read(o, h0[0], data)
            if refused:
                self._fail(f"{data!r} would write a key of an object twice (or start a key only a used one completes)")
                return False
        if not step(self, arg):
            return False
        h1 = self._t
        if data and not h1[1]:
            if w is not None or (self._u is not None and b"[" in data):
                w = self._u.advance(w, h0[0], data, h1[0])
            if v is not None or (self._vs is not None and b"[" in data):
                v = self._vs.advance(v, h0[0], data, h1[0])
            if watch and o is not None and not self._os.inside(h1[0])[0]:
                o = None  # the reading that watched died (another one went on)
        self._w = (w, o, v, self._w)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        super().rollback(num_tokens)
        w = self._w
        for _ in range(num_tokens):
            w = w[3]
        self._w = w

    def reset(self) -> None:
        super().reset()
        w = self._w
        while w[3] is not None:
            w = w[3]
        self._w = w

    def fork(self) -> "UniqueMatcher":
        m = UniqueMatcher(self._g, self._t, self._w)
        m.error = self.error
        return m
