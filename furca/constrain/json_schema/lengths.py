"""A regular language (decoded-character IR) restricted to lengths min..max, exactly.

Used when a pattern (or format) meets minLength/maxLength and the simple rewrite in
_bound_length (one variable repetition) does not apply. The engine's grammar
(`Grammar.eager_lengths` False) leaves the count to the automaton: a `Len` node over the
encoded IR with a TICK before each character (a length frame, nfa.py), where only the
counts a walk reaches become states. Grammars written as GBNF (`schema_to_gbnf`) take the
eager product where it fits: the IR becomes a Glushkov automaton (one state per
character position, counted repetitions unrolled); its product with a length counter
(0..max, or saturating at min when there is no max) becomes right-linear rules:
state(q, k) ::= char state(q', k+1) | ... | "" (when q accepts and k >= min). Only
states that can still reach acceptance are kept. Past MAX_POSITIONS positions or
MAX_STATES product states it is a length region there too (GBNF then cannot write it).
"""
from __future__ import annotations

from furca.errors import CompileError

from .encoding import encode, encode_chars
from .grammar import EMPTY, NOTHING, Alt, Bound, Cls, Len, Lit, Ref, Rep, Seq, alt, intersect, rep, seq, subtract


def length_range(node, memo=None):
    """(min, max) decoded characters; max None = unbounded. memo: {compound node: its
    range}, for IR that shares its parts (a format's)."""
    if isinstance(node, Cls):
        return (1, 1) if node.ranges else (0, 0)
    if isinstance(node, Lit):
        return len(node.text), len(node.text)
    if memo is None:
        memo = {}
    out = memo.get(node)
    if out is not None:
        return out
    if isinstance(node, Seq):
        lo, hi = 0, 0
        for i in node.items:
            a, b = length_range(i, memo)
            lo += a
            hi = None if hi is None or b is None else hi + b
        out = lo, hi
    elif isinstance(node, Alt):
        rs = [length_range(i, memo) for i in node.items] or [(0, 0)]
        out = min(r[0] for r in rs), (None if any(r[1] is None for r in rs) else max(r[1] for r in rs))
    elif isinstance(node, Rep):
        a, b = length_range(node.item, memo)
        if node.max == 0 or b == 0:
            out = a * node.min, 0
        else:
            out = a * node.min, (None if node.max is None or b is None else b * node.max)
    else:
        raise TypeError(node)
    memo[node] = out
    return out


def _bound_length(node, min_len, max_len, memo=None):
    """node restricted to lengths in [min_len, max_len], or None when not expressible simply."""
    memo = {} if memo is None else memo
    lo, hi = length_range(node, memo)
    if lo >= min_len and (max_len is not None and hi is not None and hi <= max_len or max_len is None):
        return node
    if max_len is not None and lo > max_len or (hi is not None and hi < min_len):
        return NOTHING
    if isinstance(node, Alt):
        parts = [_bound_length(b, min_len, max_len, memo) for b in node.items]
        return None if any(p is None for p in parts) else alt(*parts)
    items = list(node.items) if isinstance(node, Seq) else [node]
    var = [k for k, it in enumerate(items) if length_range(it, memo)[0] != length_range(it, memo)[1]]
    if len(var) != 1:
        return None
    k = var[0]
    v = items[k]
    fixed = sum(length_range(it, memo)[0] for j, it in enumerate(items) if j != k)
    if isinstance(v, Alt):
        sub = _bound_length(v, max(0, min_len - fixed), None if max_len is None else max_len - fixed, memo)
        if sub is None:
            return None
        items[k] = sub
        return seq(*items)
    if not isinstance(v, Rep):
        return None
    w_lo, w_hi = length_range(v.item, memo)
    if w_lo != w_hi or w_lo == 0:
        if max_len is None and w_lo >= 1 and min_len - fixed <= 1:
            # items of one character or more: at least one of them is a character or more
            # (minLength 1 of a format's repetition, the regex format's: no length frame)
            items[k] = rep(v.item, max(v.min, min_len - fixed), v.max)
            return seq(*items)
        return None
    w = w_lo
    kmin = max(v.min, -(-(min_len - fixed) // w))
    kmax = (max_len - fixed) // w if max_len is not None else None
    if v.max is not None:
        kmax = v.max if kmax is None else min(kmax, v.max)
    items[k] = rep(v.item, kmin, kmax)
    return seq(*items)




def bounded_chars(node, min_len, max_len, grammar, where, what):
    """Decoded-character IR -> JSON-encoded IR restricted to min_len..max_len characters.
    `grammar` receives the automaton's rules when the simple rewrite does not apply."""
    if min_len > 0 or max_len is not None:
        simple = _bound_length(node, min_len, max_len)
        if simple is None:
            if grammar is None:
                raise CompileError("%s: cannot combine %s with minLength/maxLength (%d..%s)"
                                   % (where, what, min_len, max_len))
            if not grammar.eager_lengths:
                return length_frame(node, min_len, max_len, grammar)
            memo = {}

            def enc(ranges):
                if ranges not in memo:
                    memo[ranges] = encode_chars(ranges)
                return memo[ranges]
            try:
                return bounded(node, min_len, max_len, enc, grammar, where)
            except TooBig:
                return length_frame(node, min_len, max_len, grammar)
        node = simple
    return encode(node)


def length_frame(node, min_len: int, max_len: int | None, grammar):
    """A rule of `grammar` for the strings of `node` (decoded-character IR without Ref)
    with min_len..max_len characters: Len over node's JSON encoding, each character
    preceded by TICK. Its size is node's, whatever the bounds."""
    return grammar.share(grammar.new_name("len"), Len(encode(node, tick=True), min_len, max_len))


MAX_POSITIONS = 400
MAX_STATES = 3000


WORD = ((48, 57), (65, 90), (95, 95), (97, 122))  # \w, the word characters of \b (ECMA-262: ASCII)


class Glushkov:
    """Position automaton of a decoded-character IR: build(node) -> (nullable, first,
    last); classes[p] are position p's code points, follow[p] the positions after it.
    More than max_positions (MAX_POSITIONS) positions raises TooBig.

    words=True reads word boundaries (Bound): each class becomes a position of its word
    characters and one of the others, so a position knows which it read; a Bound is a
    position of no character (in `bounds`, as in every other way: in first, last and
    follow sets), which `boundaries` then removes: a path p -> b1 .. bk -> q through such
    positions becomes the edge p -> q where every assertion holds between p's character
    and q's (the start and the end of the string count as non-word characters)."""

    def __init__(self, max_positions: int = MAX_POSITIONS, words: bool = False):
        self.classes = []  # position -> ranges
        self.follow = []   # position -> set of positions
        self.max_positions = max_positions
        self.words = words
        self.bounds: dict[int, bool] = {}  # position of a Bound -> negated

    def new(self, ranges):
        self.classes.append(ranges)
        self.follow.append(set())
        if len(self.classes) > self.max_positions:
            raise TooBig()
        return len(self.classes) - 1

    def build(self, node):
        """-> (nullable, first, last)"""
        if isinstance(node, Cls):
            if not node.ranges:
                return False, set(), set()
            if self.words:
                parts = [r for r in (intersect(node.ranges, WORD), subtract(node.ranges, WORD)) if r]
                ps = {self.new(r) for r in parts}
                return False, ps, set(ps)
            p = self.new(node.ranges)
            return False, {p}, {p}
        if isinstance(node, Bound):
            p = self.new(())
            self.bounds[p] = node.negated
            return False, {p}, {p}
        if isinstance(node, Lit):
            return self.seq([Cls(((ord(ch), ord(ch)),)) for ch in node.text])
        if isinstance(node, Seq):
            return self.seq(node.items)
        if isinstance(node, Alt):
            if not node.items:
                return False, set(), set()
            parts = [self.build(i) for i in node.items]
            return any(p[0] for p in parts), set().union(*[p[1] for p in parts]), set().union(*[p[2] for p in parts])
        if isinstance(node, Rep):
            items = [node.item] * node.min
            if node.max is None:
                items.append(_Star(node.item))
            elif node.max > node.min:
                opt = None
                for _ in range(node.max - node.min):
                    opt = _Opt(node.item if opt is None else Seq((node.item, opt)))
                items.append(opt)
            return self.seq(items)
        if isinstance(node, _Star):
            n, f, la = self.build(node.item)
            for p in la:
                self.follow[p] |= f
            return True, f, la
        if isinstance(node, _Opt):
            n, f, la = self.build(node.item)
            return True, f, la
        raise TypeError(node)  # decoded-character IR holds no Ref

    def boundaries(self, nullable, first, last):
        """build's (nullable, first, last) with the Bound positions removed (see the
        class): the follow sets of the other positions rewritten, first and last too."""
        if not self.bounds:
            return nullable, first, last
        bounds, follow = self.bounds, self.follow
        word = [bool(r) and intersect(r, WORD) == r for r in self.classes]
        end = set(last)

        def through(succ, w):
            """(the positions reached from a position whose character is a word one (w)
            through the Bound positions whose assertions hold, whether the end is)."""
            out, ends, seen = set(), False, set()
            todo = [(q, 0) for q in succ]
            while todo:
                q, need = todo.pop()  # need: 1 a boundary, 2 none, since the last character
                if (q, need) in seen:
                    continue
                seen.add((q, need))
                if q in bounds:
                    need |= 2 if bounds[q] else 1
                    if need == 3:
                        continue
                    if q in end and _holds(need, w, False):
                        ends = True
                    todo += [(r, need) for r in follow[q]]
                elif _holds(need, w, word[q]):
                    out.add(q)
            return out, ends

        new_first, start_ends = through(first, False)
        new_last = set()
        for p in range(len(self.classes)):
            if p in bounds:
                continue
            follow[p], ends = through(follow[p], word[p])
            if ends or p in end:
                new_last.add(p)
        for p in bounds:
            follow[p] = set()
        return nullable or start_ends, new_first, new_last

    def seq(self, items):
        nullable, first, last = True, set(), set()
        for it in items:
            n, f, la = self.build(it)
            for p in last:
                self.follow[p] |= f
            if nullable:
                first |= f
            last = la | (last if n else set())
            nullable = nullable and n
        return nullable, first, last


def has_bound(node, seen=None) -> bool:
    """Whether a decoded-character IR node holds a Bound (memoised by node: a DAG)."""
    if isinstance(node, Bound):
        return True
    if isinstance(node, (Seq, Alt)):
        seen = set() if seen is None else seen
        if id(node) in seen:
            return False
        seen.add(id(node))
        return any(has_bound(x, seen) for x in node.items)
    if isinstance(node, Rep):
        return has_bound(node.item, seen)
    return False


def _holds(need: int, before: bool, after: bool) -> bool:
    """Whether the assertions `need` (1: a boundary, 2: none) hold between a character
    that is a word one or not (before) and the next (after)."""
    return not (need & 1 and before == after) and not (need & 2 and before != after)


class _Star:
    def __init__(self, item):
        self.item = item


class _Opt:
    def __init__(self, item):
        self.item = item


class TooBig(Exception):
    """More than MAX_POSITIONS positions or MAX_STATES product states."""


def bounded(node, min_len: int, max_len: int | None, encode, grammar, where: str):
    """IR of the strings of `node` with min_len..max_len characters.

    encode(ranges) -> IR of one character as written; the rules go into `grammar`.
    Raises TooBig past MAX_POSITIONS positions or MAX_STATES product states."""
    g = Glushkov()
    nullable, first, last = g.build(node)
    succ = {-1: sorted(first)}
    for p in range(len(g.classes)):
        succ[p] = sorted(g.follow[p])
    accepting = set(last) | ({-1} if nullable else set())

    def step(k):
        return k + 1 if max_len is not None else min(k + 1, min_len)

    # forward: reachable product states
    start = (-1, 0)
    seen, order, stack = {start}, [], [start]
    while stack:
        q, k = stack.pop()
        order.append((q, k))
        if max_len is not None and k >= max_len:
            continue
        for p in succ[q]:
            t = (p, step(k))
            if t not in seen:
                seen.add(t)
                stack.append(t)
                if len(seen) > MAX_STATES:
                    raise TooBig()
    # backward: states that can reach acceptance
    live = {s for s in seen if s[0] in accepting and s[1] >= min_len}
    changed = True
    while changed:
        changed = False
        for q, k in seen:
            if (q, k) in live or (max_len is not None and k >= max_len):
                continue
            if any((p, step(k)) in live for p in succ[q]):
                live.add((q, k))
                changed = True
    if start not in live:
        return Alt(())
    names = {s: grammar.new_name("len") for s in live}
    for (q, k) in live:
        parts = []
        if q in accepting and k >= min_len:
            parts.append(EMPTY)
        if max_len is None or k < max_len:
            for p in succ[q]:
                t = (p, step(k))
                if t in live:
                    parts.append(seq(encode(g.classes[p]), Ref(names[t])))
        grammar.define(names[(q, k)], alt(*parts))
    return Ref(names[start])
