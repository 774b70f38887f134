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

A node may also be a `Bool`: an and / or / not of decoded-character IR nodes (a pattern
with lookaheads, regex.py: `^(?!X)R` is R and not "X then anything"). Its leaves join
the product like the others, and a state accepts by the whole formula; a state is
dropped as soon as the formula is false whatever the dead automata (those whose position
set is empty) are still to read.
"""
from __future__ import annotations

from furca.errors import CompileError

from .encoding import encode_chars
from .grammar import EMPTY, MAX_CP, NOTHING, Ref, alt, cls, normalize, rep, seq
from .lengths import MAX_POSITIONS, Glushkov, TooBig, has_bound

NOT_PATTERNS = "x-furca-not-patterns"
ALSO_PATTERNS = "x-furca-also-patterns"  # allOf of two patterns: the strings both match (merge.py)
# oneOf of pattern-only string branches: the strings exactly one of the patterns matches, one
# product for all the branches (exclusive.one_product)
ONE_OF_PATTERNS = "x-furca-one-of-patterns"
MAX_STATES = 3000
# a lookahead's leaves may be larger than a pattern (a negated list of ~80 reserved words
# is ~600 positions); the product's states are bounded all the same
BOOL_POSITIONS = 2000
ANY_CHAR = cls(((0, MAX_CP),))  # one character, any code point
ANY = rep(ANY_CHAR, 0, None)  # any string
_START = -1


class Bool:
    """op "and" / "or" / "not" over `parts` (decoded-character IR nodes or Bools)."""

    __slots__ = ("op", "parts")

    def __init__(self, op: str, parts: tuple):
        self.op, self.parts = op, tuple(parts)

    def __repr__(self):
        return "Bool(%s, %r)" % (self.op, self.parts)


def both(*parts):
    """The strings of every part (a Bool unless there is one part)."""
    return parts[0] if len(parts) == 1 else Bool("and", parts)


def either(*parts):
    """The strings of some part: IR alt when no part is a Bool."""
    if not any(isinstance(p, Bool) for p in parts):
        return alt(*parts)
    return parts[0] if len(parts) == 1 else Bool("or", parts)


def negation(part):
    return Bool("not", (part,))


class _Auto:
    """One pattern's Glushkov automaton: successors and acceptance of position sets."""

    def __init__(self, node, where, max_positions=MAX_POSITIONS):
        self.g = Glushkov(max_positions, words=has_bound(node))
        try:
            nullable, first, last = self.g.boundaries(*self.g.build(node))
        except TooBig:
            raise CompileError("%s: pattern too large to exclude from another" % where) from None
        self.succ = {_START: sorted(first)}
        for p in range(len(self.g.classes)):
            self.succ[p] = sorted(self.g.follow[p])
        self.accepting = set(last) | ({_START} if nullable else set())
        # positions after which every string is accepted: an accepting any-character loop
        # (a `contains` pattern's padding once it has matched)
        self.sure = {p for p in last if p in self.g.follow[p] and self.g.classes[p] == ((0, MAX_CP),)}

    def settle(self, state):
        """state, or the one sure position it holds (the least): every string is accepted
        from both, so the product keeps one state where the position sets still differ
        (`date|time|...` as a search: which words matched, 2^n sets, would otherwise all
        be states)."""
        if self.sure and not self.sure.isdisjoint(state):
            return frozenset((min(self.sure.intersection(state)),))
        return state

    def accepts(self, state) -> bool:
        return any(p in self.accepting for p in state)

    def verdict(self, state):
        """True: every string from here is accepted; False: none (no position left);
        None: not known yet."""
        if not state:
            return False
        return True if self.sure and not self.sure.isdisjoint(state) else None

    def moves(self, state):
        """(ranges, position) pairs leaving `state`."""
        return [(self.g.classes[p], p) for q in state for p in self.succ[q]]


class NotOpenEnded(CompileError):
    """difference(open_ended=True) found a prefix with finitely many completions."""


def _every_state_reaches_a_cycle(states, succ) -> bool:
    """Whether from every state of the graph `succ` (state -> successors) a cycle is
    reachable: each then has infinitely many paths onward. States with no successor
    left are peeled off until none is; those that reach a cycle always keep one."""
    left = set(states)
    while dead := {s for s in left if not any(t in left for t in succ[s])}:
        left -= dead
    return len(left) == len(states)


def difference(node, excluded, grammar, where: str, also=(), node_positions=MAX_POSITIONS, limit=None,
               open_ended=False):
    """JSON-encoded IR of the strings of decoded-char IR `node` matched by every node in
    `also` and by none of the nodes in `excluded`; the rules go into `grammar`. Any of
    them may be a Bool. node_positions: the limit of automaton positions of `node`'s
    leaves (a format's grammar is larger than a pattern; the product's states are
    bounded all the same). limit: (positions of every leaf, states), tighter bounds for
    a caller with a cheaper fallback (CompileError past them). open_ended: CompileError
    unless every prefix of a string in the difference has infinitely many completions in
    it (object keys in any member order: the matcher's watch never finds every
    completion of a key prefix used)."""
    leaf_positions, max_states = limit or (None, MAX_STATES)
    leaves = _Leaves(where, leaf_positions)
    autos = leaves.autos

    parts = [leaves(node, node_positions)] + [leaves(n) for n in also]
    if isinstance(node, Bool):  # a negation may accept characters no automaton moves on
        parts.insert(0, leaves(ANY))
    if excluded:
        parts.append(("not", [("or", [leaves(n) for n in excluded])]))
    formula = ("and", parts)
    edges = {}
    try:
        for s, out in _product(autos, formula, max_states):
            edges[s] = out
    except _TooMany:
        raise CompileError("%s: pattern excluding another needs more than %d states" % (where, max_states)) from None
    order = list(edges)  # the start first
    start = order[0]

    def accepting(s):
        return _holds(formula, [a.accepts(x) for a, x in zip(autos, s)])

    final = {s for s in order if accepting(s)}
    live = live_states(order, edges, final)
    if start not in live:
        return NOTHING
    kept = {s: {t: r for t, r in edges[s].items() if t in live} for s in order if s in live}  # in order
    if open_ended and not _every_state_reaches_a_cycle(kept, kept):
        raise NotOpenEnded("%s: a prefix of these keys has finitely many completions" % where)
    cls = _minimal_classes(kept, kept, final)
    names, first = {}, {}  # class -> rule name, its first state (its edges stand for the class's)
    for s in kept:
        if cls[s] not in names:
            names[cls[s]], first[cls[s]] = grammar.new_name("diff"), s
    for k, s in first.items():
        to = {}
        for t, r in kept[s].items():
            to.setdefault(cls[t], []).extend(r)
        parts = [EMPTY] if s in final else []
        parts += [seq(encode_chars(normalize(r)), Ref(names[c])) for c, r in to.items()]
        grammar.define(names[k], alt(*parts))
    return Ref(names[cls[start]])


def live_states(states, succ, final) -> set:
    """The states from which one of `final` is reachable (succ: state -> its successors),
    found backwards from them in one pass."""
    into = {}  # state -> the states with an edge to it
    for s in states:
        for t in succ[s]:
            into.setdefault(t, []).append(s)
    live, todo = set(final), list(final)
    while todo:
        for s in into.get(todo.pop(), ()):
            if s not in live:
                live.add(s)
                todo.append(s)
    return live


class _Leaves:
    """A formula's IR leaves as automata (`autos`), numbered: ("leaf", i) / (op, [...]);
    a node met twice is one automaton."""

    def __init__(self, where, leaf_positions=None):
        self.autos, self._shared, self._where, self._positions = [], {}, where, leaf_positions

    def __call__(self, f, positions=MAX_POSITIONS):
        if isinstance(f, Bool):
            return (f.op, [self(x, max(positions, BOOL_POSITIONS)) for x in f.parts])
        hit = self._shared.get(id(f))
        if hit is None:
            self.autos.append(_Auto(f, self._where, positions if self._positions is None else self._positions))
            hit = self._shared[id(f)] = ("leaf", len(self.autos) - 1)
        return hit


def disjoint(a, b, where: str, max_states: int = MAX_STATES) -> bool:
    """Whether no string is in both decoded-char IR nodes (or Bools) a and b: their
    product explored until a state both accept (False) or none is left (True); False
    too past max_states (not known). Such a pair of oneOf branches needs no exclusion:
    patterns that part within a few characters (`^https?://...` and `^[~|/]...`) are
    told apart in as many product states, where excluding each from the other builds
    both automata whole (JsonSchemaStore dein: a `{1,256}` repetition beside a word
    boundary, past 3,000 states)."""
    leaves = _Leaves(where)
    try:
        formula = ("and", [leaves(a), leaves(b)])
        if isinstance(a, Bool) or isinstance(b, Bool):
            formula[1].insert(0, leaves(ANY))
    except CompileError:
        return False
    autos = leaves.autos
    try:
        for s, _out in _product(autos, formula, max_states):
            if _holds(formula, [x.accepts(y) for x, y in zip(autos, s)]):
                return False
    except _TooMany:
        return False
    return True


class _TooMany(Exception):
    """_product met more than its max_states states."""


def _product(autos, formula, max_states):
    """The product automaton's states from the start, depth first, each with its
    successors ({next state: code-point ranges}, _step); raises _TooMany once more than
    max_states states are met."""
    start = tuple(frozenset([_START]) for _ in autos)
    seen, todo, verdicts = {start}, [start], {}
    while todo:
        s = todo.pop()
        out = _step(autos, s, formula, verdicts)
        yield s, out
        for t in out:
            if t not in seen:
                seen.add(t)
                todo.append(t)
                if len(seen) > max_states:
                    raise _TooMany()


def _minimal_classes(states, edges, final):
    """Moore's partition refinement of a deterministic automaton (edges: state -> {next
    state: code-point ranges}, disjoint; a missing code point: no string goes on): state
    -> the id of its class of equivalent states (the same strings take both to the end).
    The product of several patterns' automata has many equivalent states (o65510's oneOf
    of five `contains` patterns: ~1,100 states a branch, its rules a cold mask walks)."""
    cls = {s: int(s in final) for s in states}
    count = len(set(cls.values()))
    while True:
        sigs, new = {}, {}
        for s in states:
            moves = sorted((lo, hi, cls[t]) for t, r in edges[s].items() for lo, hi in r)
            merged = []
            for lo, hi, k in moves:
                if merged and merged[-1][2] == k and merged[-1][1] + 1 == lo:
                    merged[-1] = (merged[-1][0], hi, k)
                else:
                    merged.append((lo, hi, k))
            new[s] = sigs.setdefault((cls[s], tuple(merged)), len(sigs))
        if len(sigs) == count:  # a refinement with as many classes is the same partition
            return new
        cls, count = new, len(sigs)


def _step(autos, state, formula, verdicts):
    """{next state: code-point ranges} for the code points some automaton moves on; a
    state whose formula is false whatever its live automata read next is left out (a
    string that an automaton it needs cannot continue is never accepted). verdicts:
    {each automaton's `verdict` on the next state: whether the formula can still hold},
    shared by the steps of one product."""
    moves = [a.moves(x) for a, x in zip(autos, state)]
    cuts = sorted({b for ms in moves for r, _ in ms for lo, hi in r for b in (lo, hi + 1)})
    index = {b: i for i, b in enumerate(cuts)}
    span = range(len(cuts) - 1)
    covered = []  # per automaton, per elementary interval [cuts[i], cuts[i + 1]): the positions moved to
    for ms in moves:
        at = [[] for _ in span]
        for r, p in ms:
            for lo, hi in r:
                for i in range(index[lo], index[hi + 1]):
                    at[i].append(p)
        covered.append(at)
    out = {}
    for i in span:
        nxt = tuple(a.settle(frozenset(at)) for a, at in zip(autos, (at[i] for at in covered)))
        known = tuple(a.verdict(x) for a, x in zip(autos, nxt))
        ok = verdicts.get(known)
        if ok is None:
            ok = verdicts[known] = _holds(formula, list(known)) is not False
        if not ok:
            continue
        out.setdefault(nxt, []).append((cuts[i], cuts[i + 1] - 1))
    return out


def _holds(f, values):
    """f under the leaves' values: True, False or None (not known yet), three-valued."""
    op, parts = f
    if op == "leaf":
        return values[parts]
    if op == "not":
        v = _holds(parts[0], values)
        return None if v is None else not v
    got = [_holds(x, values) for x in parts]
    if op == "and":
        return False if False in got else None if None in got else True
    return True if True in got else None if None in got else False

