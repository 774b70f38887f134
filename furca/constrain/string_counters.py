"""The abstract masks inside bounded JSON strings, read off tables of the tokenizer.

A string with a maxLength is a counter over one JSON string character (`"` x{lo,hi} `"`,
json_schema/scalars.py: counted whatever its bounds, json_schema.grammar.counted; a
pattern's x{lo,hi} over one class is one past nfa.COUNTER_THRESHOLD). Inside it, every
count is a new automaton state, and so a new abstract state (contexts.ContextSplit.context:
the string's rule with its caller cut off), whose mask was a slice search and a recording
walk of the trie's tokens outside the slice: ~300-500 µs a token, for each token of the
first string of each maxLength (a uuid of 36 characters: 36 of them).

Which tokens such an abstract state allows depends only on the character's language and
two numbers. With the frame's count k (the k-th body begun, none of its bytes read),
bodies k .. hi may still run: `room` = hi - k + 1 characters, and the closing quote needs
`need` = max(1, lo - k + 1) of them first, or none where the counter's exit is one of the
state's configurations already. A token whose bytes are string content of L
characters (one begun at its end counted whole) is allowed exactly when L <= room; one
whose first quote at a character boundary comes after c characters ends the string there
when need <= c <= room: its trie node is where the rule returns (the recording walk's
return node), from which masks.py walks the rest of its subtree from the caller's state.

So, per tokenizer and character DFA, StringTable reads the token trie once
(_string_kernels.string_table: each token's length, each closing node and its count) and
keeps the allowed tokens by length as cumulative bitmasks; an abstract state at a
counter's body start is then (words, return nodes) from those arrays, no search and no
walk. BoundedStrings recognises such states: the body must be one JSON-string-like
character (its NFA read as a DFA that ends at the body's end after each character and
takes no quote at its start; the DFA, from the body's shape, is shared by every grammar),
the exit the closing quote and the rule's end, and the state exactly the body's
configuration under the counter frame (plus the exit's, past the minimum). Anything else
is left to masks.py's walks. See DESIGN.md ("Bounded strings from tables").
"""

from __future__ import annotations

import threading

import numpy as np

from . import _walk

MAX_BODY_NODES = 64  # a counter body's nodes read for its shape
MAX_DFA_STATES = 64  # DFA states of one character
LEVELS = 65  # room values 0..LEVELS-1 kept as bitmasks; a larger room adds its tokens to the last one
SMALL = 4096  # content tokens up to which a table keeps no bitmasks (the long tokens' trie)
MAX_PARTS = 4096  # (need, room) return nodes kept per table
MAX_BASES = 256  # rooms' bitmasks kept per table past its levels (16 KB each for Llama-3.1)
# a character's tables not made at the warm-up (a pattern's class) are made at its
# counter's MAKE_AFTER-th abstract state (~1.7 ms for Llama-3.1, ~6 walks of a count):
# a short string walks its few counts as before
MAKE_AFTER = 4

_LOCK = threading.Lock()
_DFAS: dict = {}  # body shape -> DFA (int16 [states, 256]) or None
_KERNELS: list = []  # [the module _string_kernels], once imported (_kernels)


def _kernels():
    """The module _string_kernels, or None without numba (the walks then serve); kept
    here after its first import: a function-level `from . import ...` runs importlib's
    Python code (_handle_fromlist) at every call, whose pages a process forked after
    set-up (the shared harness) copies at its first grammar with a bounded string."""
    if not _KERNELS:
        if _walk.get_walk_range() is None:
            return None
        from . import _string_kernels

        _KERNELS.append(_string_kernels)
    return _KERNELS[0]


class StringTable:
    """The tokens of one of a tokenizer's tries (its whole trie, or the long tokens' of
    masks.TokenMasks._tiered_mask) read as the content of a JSON string whose character
    is the DFA dfa (see the module docstring). part(need, room) -> (words, base, roots)."""

    def __init__(self, info, dfa, trie, levels=False):
        k = _kernels()
        n_tok = info.num_words * 32
        tok_len = np.full(n_tok, -1, np.int32)
        close_node = np.empty(trie.num_nodes, np.int32)
        close_k = np.empty(trie.num_nodes, np.int32)
        m = k.string_table(dfa, trie.dfs_depth, trie.dfs_byte, trie.dfs_end, trie.tok_start, trie.tok_ids,
                           tok_len, close_node, close_k)
        self._num_words = info.num_words
        ids, lens = np.empty(n_tok, np.int32), np.empty(n_tok, np.int32)
        n = k.by_length(tok_len, ids, lens)
        self._ids, self._lens = ids[:n].copy(), lens[:n].copy()  # the content tokens, fewest characters first
        self._levels = None
        if levels and len(self._ids) > SMALL:  # the rooms 0..LEVELS-1 as bitmasks, made at once
            rows = np.zeros((LEVELS, info.num_words), np.uint32)
            k.len_levels(tok_len, rows)
            rows.setflags(write=False)  # masks are stored as Deltas against these rows
            self._levels = rows
        order = np.lexsort((close_node[:m], close_k[:m]))  # by count, then node
        self._close_k = close_k[:m][order].copy()
        self._close_node = close_node[:m][order].copy()
        starts, stops = trie.tok_start[self._close_node], trie.tok_start[self._close_node + 1]
        self._close_off = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.intp)
        self._close_tok = (np.concatenate([trie.tok_ids[a:b] for a, b in zip(starts.tolist(), stops.tolist())])
                           if m else np.zeros(0, np.int32)).astype(np.int32)
        self._parts: dict = {}  # (need, room) -> (closing tokens, return nodes)
        self._bases: dict = {}  # room -> _base(room), past the levels
        self._set = k.set_bits
        # a room of `cap` characters or more admits every content token and closes at every
        # closing node: part() takes it as cap, so every long maxLength (and each of its
        # counts) shares one base and one part, made at the warm-up (warm)
        self.close_max = int(self._close_k[-1]) if m else 0  # the most characters before a closing quote
        self.cap = max(int(self._lens[-1]) if len(self._lens) else 0, self.close_max)

    def _base(self, room):
        """The packed int32 words of the content tokens of at most `room` characters
        (read-only: stored masks may be Deltas against it), or None for a trie of few
        tokens (then part's words are made from the token list). From the levels where
        they were made (the warm-up's tables), else made on first use and kept
        (MAX_BASES of them)."""
        if len(self._ids) <= SMALL:
            return None
        if self._levels is not None and room < LEVELS:
            return self._levels[room].view(np.int32)
        hit = self._bases.get(room)
        if hit is None:
            stop = int(self._lens.searchsorted(room, side="right"))
            if self._levels is not None:
                words = self._levels[LEVELS - 1].copy()
                self._set(words, self._ids[int(self._lens.searchsorted(LEVELS, side="left")) : stop])
            else:
                words = np.zeros(self._num_words, np.uint32)
                self._set(words, self._ids[:stop])
            hit = words.view(np.int32)
            hit.setflags(write=False)
            if len(self._bases) < MAX_BASES:
                self._bases[room] = hit
        return hit

    def part(self, need: int, room: int):
        """(words, base, roots): the abstract mask of a body start with `need` and `room`
        characters (uint32, the caller's to write), the read-only int32 words it began as
        (None for a trie of few tokens), and the return nodes (int32, sorted) in the trie."""
        room = min(room, self.cap)
        base = self._base(room)
        if base is None:
            words = np.zeros(self._num_words, np.uint32)
            self._set(words, self._ids[: int(self._lens.searchsorted(room, side="right"))])
        else:
            words = base.view(np.uint32).copy()
        closing, roots = self._closing(need, room)
        if len(closing):
            self._set(words, closing)
        return words, base, roots.copy()

    def _closing(self, need: int, room: int):
        """(the closing tokens, the return nodes: read-only) of a body start with `need`
        and `room` characters, kept per the counts that can differ (none closes past
        close_max characters)."""
        kmax = self.close_max
        key = (min(need, kmax + 1), min(room, kmax))
        hit = self._parts.get(key)
        if hit is None:
            # array methods, not numpy's Python-level functions: a process forked after
            # set-up (the shared harness) writes the pages of those it runs first
            lo = int(self._close_k.searchsorted(need, side="left"))
            hi = int(self._close_k.searchsorted(room, side="right"))
            roots = self._close_node[lo:hi].copy()
            roots.sort()
            roots.setflags(write=False)
            hit = (self._close_tok[self._close_off[lo] : self._close_off[max(lo, hi)]], roots)
            if len(self._parts) < MAX_PARTS:
                self._parts[key] = hit
        return hit

    def warm(self) -> None:
        """Every part's closing tokens and return nodes, and the base of a room past every
        token (BoundedStrings.warm: the compiler's warm-up)."""
        for need in range(self.close_max + 2):
            for room in range(self.close_max + 1):
                self._closing(need, room)
        self._base(self.cap)


def string_table(info, dfa, trie, levels=False, make=True) -> StringTable | None:
    """The StringTable of tokenizer info's trie `trie` (info.trie or info.long_trie) and
    character DFA dfa, made once per process (kept by the TokenizerInfo); levels: its
    rooms' bitmasks made at once (the compiler's warm-up: ~1 MB, 256 pages a forked
    request would write first), else each on first use; make False: None where it is not
    made yet."""
    key = (dfa.tobytes(), trie is info.long_trie)
    with _LOCK:
        per = info.string_tables  # kept by the tokenizer (a WeakKeyDictionary's get is Python code)
        table = per.get(key)
        if table is None and make:
            table = per[key] = StringTable(info, dfa, trie, levels)
    return table


def body_shape(nfa, start, special=None):
    """The shape of a counter body from its start node: its nodes numbered in the order a
    breadth-first search meets them, each ((lo, hi, target number), ...), (epsilon target
    numbers), whether it ends the body); None where a node is a call, counter, length
    region, lookahead or counts characters (its meaning is more than its edges), or the
    body has more than MAX_BODY_NODES nodes. special: those nodes as one set (made here
    if not given)."""
    if special is None:
        special = _special(nfa)
    num = {start: 0}
    order = [start]
    out = []
    for n in order:
        if n in special:
            return None
        for t in [t for _lo, _hi, t in nfa.edges[n]] + list(nfa.eps[n]):
            if t not in num:
                if len(order) >= MAX_BODY_NODES:
                    return None
                num[t] = len(order)
                order.append(t)
        out.append((tuple((lo, hi, num[t]) for lo, hi, t in nfa.edges[n]), tuple(num[t] for t in nfa.eps[n]),
                    n in nfa.is_end))
    return tuple(out)


def _special(nfa) -> set:
    """The NFA nodes body_shape refuses: calls, counters, length regions, lookaheads,
    ticks, key trie nodes."""
    return (set(nfa.call) | set(nfa.counter) | set(nfa.length) | set(nfa.need) | set(nfa.tick)
            | set(nfa.key_trie_nodes))


def shape_dfa(shape):
    """The DFA of one character of a body of this shape (body_shape): int16 [states,
    256] of the next state, DEAD or DONE (_string_kernels), state 0 the start; None
    where the body is empty-able, a byte leads both to its end and on, it has over
    MAX_DFA_STATES states, or its start takes a quote. Cached per shape."""
    with _LOCK:
        if shape in _DFAS:
            return _DFAS[shape]
    res = _dfa(shape)
    with _LOCK:
        _DFAS[shape] = res
    return res


def _dfa(shape):
    k = _kernels()
    DEAD, DONE, QUOTE = k.DEAD, k.DONE, k.QUOTE  # noqa: N806 - the kernels' constants

    def closure(nodes):
        seen, todo = set(nodes), list(nodes)
        while todo:
            for t in shape[todo.pop()][1]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(x for x in seen if shape[x][0]), any(shape[x][2] for x in seen)

    start, ends = closure([0])
    if ends or not start:
        return None
    ids = {start: 0}
    todo = [start]
    rows = []
    while todo:
        cur = todo.pop(0)
        row = np.full(256, DEAD, np.int16)
        for b in range(256):
            targets = [t for x in cur for lo, hi, t in shape[x][0] if lo <= b <= hi]
            if not targets:
                continue
            nxt, done = closure(targets)
            if done:
                if nxt:
                    return None  # the character may end here or go on
                row[b] = DONE
                continue
            if nxt not in ids:
                if len(ids) >= MAX_DFA_STATES:
                    return None
                ids[nxt] = len(ids)
                todo.append(nxt)
            row[b] = ids[nxt]
        rows.append(row)
    dfa = np.stack(rows)
    if dfa[0, QUOTE] != DEAD:
        return None
    return dfa


class BoundedStrings:
    """part(ab, trie) -> (words, return nodes, trie, base) or None, for one grammar's
    automaton (masks.TokenMasks' recording walks of abstract states, over the whole
    trie or the long tokens'; under the automaton's lock)."""

    @classmethod
    def of(cls, automaton):
        """The BoundedStrings of an automaton with counters, where numba is installed (the
        tables' kernels), else None."""
        return cls(automaton) if automaton.nfa.counter and _kernels() is not None else None

    def __init__(self, automaton):
        self._a = automaton
        self._specs: dict[int, object] = {}  # counter node -> (character DFA, exit configuration) or None
        self._met: dict[int, int] = {}  # counter node -> its states met while its DFA has no table yet
        self._special = None  # body_shape's refused nodes, made at the first counter

    def _spec(self, counter):
        """(DFA, exit configuration) of a counter over a JSON-string-like character whose
        exit is the closing quote and then the rule's end, or None."""
        if counter in self._specs:
            return self._specs[counter]
        a = self._a
        nfa = a.nfa
        body, done, _lo, _hi = nfa.counter[counter]
        res = None
        if counter not in nfa.item_counters:
            if self._special is None:
                self._special = _special(nfa)
            shape = body_shape(nfa, body, self._special)
            dfa = shape_dfa(shape) if shape is not None else None
            edges = nfa.edges[done]
            if (dfa is not None and len(edges) == 1 and edges[0][:2] == (0x22, 0x22)
                    and a.closure(done, a.cut) == (((done, a.cut),), False)
                    and a.closure(edges[0][2], a.cut) == ((), True)):
                res = (dfa, (done, a.cut))
        self._specs[counter] = res
        return res

    def warm(self) -> None:
        """Makes the tables of every counter of this grammar that qualifies, over the
        tokenizer's trie and the long tokens', with every part's closing nodes and the base
        of a room past every token (a maxLength over ~128 characters) (the compiler's
        warm-up: a forked or new request then finds them made; made in a forked request's
        first such string they were ~1.2 ms and ~330 page faults)."""
        info = self._a.info
        for counter in self._a.nfa.counter:
            spec = self._spec(counter)
            if spec is not None:
                for trie in (info.trie, info.long_trie):
                    string_table(info, spec[0], trie, levels=True).warm()

    def part(self, ab, trie):
        """The recording walk's result over trie for abstract state ab, from the table,
        where ab is a counter body's start under a counter frame over the context frame
        (plus the counter's exit configuration when past its minimum), and the counter's
        spec holds."""
        hit = self.locate(ab, trie)
        if hit is None:
            return None
        table, need, room = hit
        words, base, roots = table.part(need, room)
        return words, roots, trie, base

    def locate(self, ab, trie, count=True):
        """(table, need, room) of part(ab, trie), or None where the table does not serve ab.
        count False: a table not made yet is None, and this state is not counted towards
        making it (contexts.ContextSplit.contexts asks before part, computing nothing)."""
        a = self._a
        if a.accepting[ab]:
            return None
        configs = a.configs[ab]
        if not 0 < len(configs) <= 2:
            return None
        frames, counters, cut = a.stacks.frames, a.nfa.counter, a.cut
        body_cfg, rest = None, []
        for n, st in configs:
            if st > 0 and body_cfg is None:
                ret, parent, k = frames[st]
                if k and parent == cut and counters.get(ret, (-1,))[0] == n:
                    body_cfg = (ret, k)
                    continue
            rest.append((n, st))
        if body_cfg is None:
            return None
        counter, k = body_cfg
        spec = self._spec(counter)
        if spec is None:
            return None
        dfa, exit_cfg = spec
        _body, _done, lo, hi = counters[counter]
        # the string may close after c characters where c >= 1 bodies end past the minimum,
        # and at once where the exit is a configuration already (past the minimum, or a
        # canonical form: automaton.canonical's count max(lo, 1) keeps the exit)
        need = max(1, lo - k + 1)
        if rest:
            if rest != [exit_cfg] or need > 1:
                return None  # closing at once and only after `need` characters: not one range
            need = 0
        table = string_table(a.info, dfa, trie, make=False)
        if table is None and not count:
            return None
        if table is None:  # a character of its own (a pattern's class): its tables pay from a few counts on
            met = self._met[counter] = self._met.get(counter, 0) + 1
            if met < MAKE_AFTER:
                return None
            table = string_table(a.info, dfa, trie)
        return table, need, hi - k + 1
