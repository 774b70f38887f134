"""Strings matching one pattern and none of others: the grammar of L(A) minus L(B1..Bn).

oneOf branches that are strings constrained only by `pattern` are made exclusive with
this (exclusive.py marks each with the other branches' patterns under the internal
keyword `x-furca-not-patterns`), so `oneOf: [lower-case uuid, upper-case uuid]` accepts
the uuids only one pattern matches, exactly, instead of no string at all.

Each pattern's decoded-character IR becomes a Glushkov automaton (lengths.py); the
subset construction runs over all of them at once. A state is the tuple of each
automaton's current position set; its outgoing code points are cut into the intervals on
which every automaton moves alike, and intervals leading to the same state share one
class. A state accepts when A's set accepts and no B's does. Only states that can still
reach acceptance are kept, written as right-linear rules (state ::= char state' | "").
More than MAX_STATES states -> CompileError.
"""
from __future__ import annotations

from furca.errors import CompileError

from .encoding import encode_chars
from .grammar import EMPTY, NOTHING, Ref, alt, normalize, seq
from .lengths import MAX_POSITIONS, Glushkov, TooBig

NOT_PATTERNS = "x-furca-not-patterns"
ALSO_PATTERNS = "x-furca-also-patterns"  # allOf of two patterns: the strings both match (merge.py)
MAX_STATES = 3000
_START = -1


class _Auto:
    """One pattern's Glushkov automaton: successors and acceptance of position sets."""

    def __init__(self, node, where, max_positions=MAX_POSITIONS):
        self.g = Glushkov(max_positions)
        try:
            nullable, first, last = self.g.build(node)
        except TooBig:
            raise CompileError("%s: pattern too large to exclude from another" % where) from None
        self.succ = {_START: sorted(first)}
        for p in range(len(self.g.classes)):
            self.succ[p] = sorted(self.g.follow[p])
        self.accepting = set(last) | ({_START} if nullable else set())

    def accepts(self, state) -> bool:
        return any(p in self.accepting for p in state)

    def moves(self, state):
        """(ranges, position) pairs leaving `state`."""
        return [(self.g.classes[p], p) for q in state for p in self.succ[q]]


def difference(node, excluded, grammar, where: str, also=(), node_positions=MAX_POSITIONS):
    """JSON-encoded IR of the strings of decoded-char IR `node` matched by every node in
    `also` and by none of the nodes in `excluded`; the rules go into `grammar`.
    node_positions: `node`'s own limit of automaton positions (a format's grammar is
    larger than a pattern; the product's states are bounded all the same)."""
    also = list(also)
    autos = [_Auto(node, where, node_positions)] + [_Auto(n, where) for n in also + list(excluded)]
    n_in = 1 + len(also)
    start = tuple(frozenset([_START]) for _ in autos)
    edges, order, todo = {}, [start], [start]
    seen = {start}
    while todo:
        s = todo.pop()
        out = edges[s] = _step(autos, s, n_in)
        for t in out:
            if t not in seen:
                seen.add(t)
                order.append(t)
                todo.append(t)
                if len(seen) > MAX_STATES:
                    raise CompileError("%s: pattern excluding another needs more than %d states"
                                       % (where, MAX_STATES))

    def accepting(s):
        return all(a.accepts(x) for a, x in zip(autos[:n_in], s[:n_in])) and \
            not any(a.accepts(x) for a, x in zip(autos[n_in:], s[n_in:]))

    live = {s for s in order if accepting(s)}
    changed = True
    while changed:
        changed = False
        for s in order:
            if s not in live and any(t in live for t in edges[s]):
                live.add(s)
                changed = True
    if start not in live:
        return NOTHING
    kept = [s for s in order if s in live]
    names = {s: grammar.new_name("diff") for s in kept}
    for s in kept:
        parts = [EMPTY] if accepting(s) else []
        parts += [seq(encode_chars(normalize(r)), Ref(names[t])) for t, r in edges[s].items() if t in live]
        grammar.define(names[s], alt(*parts))
    return Ref(names[start])


def _step(autos, state, n_in=1):
    """{next state: code-point ranges} for the code points some automaton moves on;
    the sets of the first n_in automata (A and those it is intersected with) may not be
    empty (a string one of them cannot continue is never accepted)."""
    moves = [a.moves(x) for a, x in zip(autos, state)]
    cuts = sorted({b for ms in moves for r, _ in ms for lo, hi in r for b in (lo, hi + 1)})
    out = {}
    for lo, hi in zip(cuts, cuts[1:]):
        nxt = tuple(frozenset(p for r, p in ms if _covers(r, lo)) for ms in moves)
        if not all(nxt[:n_in]):
            continue
        out.setdefault(nxt, []).append((lo, hi - 1))
    return out


def _covers(ranges, cp) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)
