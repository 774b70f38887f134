"""The proof that a configuration alone survives every string of slice characters.

SliceProof receives the automaton (automaton.LazyAutomaton) and is used by
slices.SliceBounds: a proven configuration's slice depth is UNBOUNDED. It reads the
NFA, the per-node byte classes and closures of the automaton, and interns no state: a
key-exclusion trie of a hundred declared names (every slice character leads to a
child or to key-rest) is proven in one pass over its NFA nodes, where the search over
states runs out of its budget and the mask then walks the whole token trie.
"""

from __future__ import annotations

from .automaton import LazyAutomaton
from .deadline import check as check_deadline
from .stacks import AutomatonLimit

UNBOUNDED = 1 << 30  # slice depth of a state no slice string can kill
PROOF_BUDGET = 2048  # (configuration, position in a character) pairs one proof may explore


class SliceProof:
    """unbounded(c, sl) and node_covers(n, sl), cached per slice."""

    def __init__(self, automaton: LazyAutomaton):
        self._a = automaton
        self._canon_stack = automaton.canonical_stack if automaton.nfa.counter else None
        self._covers: dict[str, dict] = {}  # slice name -> {NFA node: whether its edges take every first byte}
        self._proven: dict[str, dict] = {}  # slice name -> {configuration: whether unbounded(c) holds}

    def node_covers(self, n: int, sl) -> bool:
        """Whether NFA node n has an edge on every first byte of a slice character. When it
        has not, a configuration at n alone dies on the first slice character (depth 0):
        SliceBounds knows that without interning, expanding and searching the single
        state (at an object key, 18-100 configurations sit in key tries on one byte each)."""
        cache = self._covers.setdefault(sl.name, {})
        hit = cache.get(n)
        if hit is None:
            covered = 0
            for lo, hi, _t in self._a.nfa.edges[n]:
                covered |= (1 << (hi + 1)) - (1 << lo)
            hit = cache[n] = not sl.first_bytes & ~covered
        return hit

    def unbounded(self, c, sl) -> bool:
        """Whether configuration c alone provably survives every string of slice characters
        (then its abstract single state's depth is UNBOUNDED).

        A greatest fixpoint over pairs (configuration, rest of the current character's byte
        ranges; () at a character boundary): a pair holds if, for every byte it may meet
        next (every slice character's first byte at a boundary), some successor
        configuration's pair holds. Sound: from a holding pair every slice character
        keeps a live configuration. Pairs past PROOF_BUDGET count as failing. Counter
        stacks are taken in canonical form, as in slice_depth (a token is shorter than
        the distance to the bound)."""
        cache = self._proven.setdefault(sl.name, {})
        hit = cache.get(c)
        if hit is None:
            hit = self._prove(c, sl, cache)
        return hit

    def _prove(self, c, sl, cache) -> bool:
        """unbounded's search and fixpoint; caches the configurations it settles."""
        firsts = [(seq[0], tuple(seq[1:])) for seq in sl.utf8_seqs]
        needs = {}  # pair -> [[pairs, one of which must hold], ...]
        todo, complete = [(c, ())], True
        while todo:
            pair = todo.pop()
            if pair in needs:
                continue
            check_deadline()
            if len(needs) >= PROOF_BUDGET:
                complete = False
                break
            cfg, rest = pair
            known = cache.get(cfg) if not rest else None
            if known is None and not rest and not self.node_covers(cfg[0], sl):
                known = cache[cfg] = False
            if known is not None:
                needs[pair] = [] if known else [[]]
                continue
            needs[pair] = reqs = []
            for (lo, hi), tail in (firsts if not rest else [(rest[0], rest[1:])]):
                try:
                    spans = self._successors(cfg, lo, hi)
                except AutomatonLimit:  # nesting too deep: no proof (the state search decides)
                    spans = None
                if spans is None:
                    reqs.append([])
                    break
                for succ in spans:
                    req = [(d, tail) for d in succ]
                    reqs.append(req)
                    todo.extend(req)
        holds = _greatest_fixpoint(needs)
        for (cfg, rest), ok in holds.items():
            if not rest and (ok or complete):
                cache[cfg] = ok
        cache[c] = holds[(c, ())]
        return cache[c]

    def _successors(self, cfg, lo, hi):
        """For configuration cfg and the bytes lo..hi: the successor configurations of each
        byte class there (tuples), or None when some byte of lo..hi has no edge."""
        n, st = cfg
        canon = self._canon_stack
        closure = self._a.closure
        out, at = [], lo
        for a, b, targets in self._a.template(n):
            if b <= lo or a > hi:
                continue
            if a > at:
                return None
            at = b
            succ = set()
            for t in targets:
                succ.update(closure(t, st)[0])
            if canon is not None:
                succ = {(m, canon(x)) for m, x in succ}
            out.append(tuple(succ))
        return out if at > hi else None


def _greatest_fixpoint(needs):
    """{pair: holds} for an and-or graph: pair -> list of requirements, each a list of
    pairs one of which must hold; pairs missing from needs fail. Starts from "all hold"
    and drops, through reverse edges, every pair with a requirement left without options."""
    holds = dict.fromkeys(needs, True)
    alive = []  # per requirement: its options that still hold
    users = {}  # pair -> requirements it is an option of
    dead = []
    for pair, reqs in needs.items():
        for req in reqs:
            k = len(alive)
            opts = len([d for d in req if d in holds])
            alive.append(opts)
            if not opts:
                dead.append(pair)
            for d in req:
                users.setdefault(d, []).append((k, pair))
    while dead:
        pair = dead.pop()
        if not holds[pair]:
            continue
        holds[pair] = False
        for k, owner in users.get(pair, ()):
            alive[k] -= 1
            if not alive[k] and holds[owner]:
                dead.append(owner)
    return holds
