"""The proof that a set of configurations survives every string of slice characters.

SliceProof receives the automaton (automaton.LazyAutomaton) and is used by
slices.SliceBounds: a proven configuration set's slice depth is UNBOUNDED. It reads the
NFA, the per-node byte classes and closures of the automaton, and interns no state: a
key-exclusion trie of a hundred declared names (every slice character leads to a
child or to key-other / key-rest) is proven in one pass over its NFA nodes, where the
search over states runs out of its budget and the mask then walks the whole token trie.

The unit of the proof is a set of configurations (a "unit": sorted, stacks in canonical
form), not a single one: a key trie's state is its trie node (the ASCII characters) plus
the shared rule key-other's start (the rest), and neither survives alone.

free_unbounded is the same proof over stack-free units (NFA node sets: the part of a
closure that stays above any stack; a return counts as dying), tried first for every
state: its units do not depend on the call site or the stack, so a key trie is proven
once per grammar and key-other's continuation nodes once for every trie. The parts of
a key trie's nodes take a short path (key_trie_proof.KeyTrieParts): their requirements
read off the trie's marks and the nodes' edges, a verdict given to the whole trie.
"""

from __future__ import annotations

from .automaton import LazyAutomaton
from .copy_chains import CopyChains
from .deadline import check as check_deadline
from .key_trie_proof import KeyTrieParts
from .stacks import AutomatonLimit

UNBOUNDED = 1 << 30  # slice depth of a state no slice string can kill
PROOF_BUDGET = 256  # (unit, position in a character) pairs one proof over stacks may explore (~15 ms)
FREE_CALL_DEPTH = 64  # callees _free_unit assembles from their own units, nested
FREE_BUDGET = 1 << 14  # pairs one stack-free proof may explore (free_unbounded: its units are shared grammar-wide)
PROBE_CHARS = 1024  # characters the refutation probe (SliceProof._killed) may follow


class SliceProof:
    """unbounded(configs, sl) and node_covers(n, sl), cached per slice."""

    def __init__(self, automaton: LazyAutomaton):
        self._a = automaton
        self._canon_stack = automaton.canonical_stack if automaton.nfa.counter or automaton.nfa.length else None
        self._bytes: dict[int, int] = {}  # NFA node -> bit set of the bytes its edges take
        self._tick = automaton.nfa.tick  # nodes whose bytes count a length region's characters
        self._units: dict[tuple, tuple] = {}  # (node, stack) -> the unit of its closure
        self._tail_fns: dict[str, object] = {}  # slice name -> _tails(sl)
        self._proven: dict[str, dict] = {}  # slice name -> {unit: whether it survives every slice string}
        self._spent: dict[str, set] = {}  # slice name -> node tuples of units whose proof ran out of budget
        self._complete = True  # whether the last _prove explored everything within its budget
        self._parts: dict[str, dict] = {}  # slice name -> {(configuration,): whether its part holds} (_split)
        self._free_spans: dict[tuple, tuple] = {}  # _spans of stack-free configurations, grammar-wide
        self.tries = KeyTrieParts(automaton.nfa, self._units)  # key trie nodes' parts (key_trie_proof.py)
        self.chains = CopyChains(automaton.nfa.copies)  # chains of copies in length regions (nfa.py)

    def node_bytes(self, n: int) -> int:
        """The bytes NFA node n's edges take, as a bit set (bit b: byte b), cached."""
        hit = self._bytes.get(n)
        if hit is None:
            hit = 0
            for lo, hi, _t in self._a.nfa.edges[n]:
                hit |= (1 << (hi + 1)) - (1 << lo)
            self._bytes[n] = hit
        return hit

    def _cfg_bytes(self, cfg) -> int:
        """The bytes configuration cfg takes: its node's, or none at a node that starts a
        character of a length region whose count is used up or unknown (stack None)."""
        n = cfg[0]
        if n in self._tick and self._a.byte_stack(n, cfg[1]) == -1:
            return 0
        hit = self._bytes.get(n)
        return self.node_bytes(n) if hit is None else hit

    def node_covers(self, n: int, sl) -> bool:
        """Whether NFA node n has an edge on every first byte of a slice character. When it
        has not, a configuration at n alone dies on the first slice character (depth 0):
        SliceBounds knows that without interning, expanding and searching the single
        state (at an object key, 18-100 configurations sit in key tries on one byte each)."""
        return not sl.first_bytes & ~self.node_bytes(n)

    def unbounded(self, configs, sl) -> bool:
        """Whether the configurations `configs` together provably survive every string of
        slice characters: after each one, some configuration of the set is still alive
        (then a state with these configurations has depth UNBOUNDED).

        A greatest fixpoint over pairs (unit, rest of the current character's byte ranges;
        () at a character boundary): a pair holds if, for every byte it may meet next
        (every slice character's first byte at a boundary), the unit has an edge on it to
        some target whose closure's pair holds. Sound: from a holding pair every slice
        character keeps a live configuration. Pairs past PROOF_BUDGET count as failing.
        Counter stacks are taken in canonical form, as in slice_depth (a token is shorter
        than the distance to the bound). A unit whose NFA nodes are those of a unit whose
        proof ran out of its budget is not tried (not proven: the state search decides):
        the same nodes under the next count of a counter (the words of a string limited
        to 100 words: a state per word) would each spend the whole budget again."""
        canon = self._canon_stack
        unit = tuple(sorted({(n, canon(st)) for n, st in configs} if canon is not None else set(configs)))
        cache = self._proven.setdefault(sl.name, {})
        hit = cache.get(unit)
        if hit is None:
            nodes = tuple(n for n, _st in unit)
            spent = self._spent.setdefault(sl.name, set())
            if nodes in spent or self._killed(unit, sl, cache):
                hit = cache[unit] = False
            else:
                hit = cache[unit] = self._prove(unit, sl, cache)
                if not hit and not self._complete:
                    spent.add(nodes)
        return hit

    def free_unbounded(self, configs, sl) -> bool:
        """Whether the NFA nodes of `configs` survive every string of slice characters
        whatever their stacks: the proof of `unbounded` over stack-free units (a target's
        unit is the stack-independent part of its closure, Closures.relative: the
        calls it makes are entered, a return below it counts as dying). Sound for any
        stacks: every path it follows exists from every stack (the nesting limit aside,
        which the matcher checks on the final mask). Its units are NFA node sets, so each
        is proven once per grammar, whichever state, call site or stack it is met in: a
        key-exclusion trie node's unit is the node plus key-other's start (the call its
        closure makes), its children's units are the children's, and a slice character
        either follows a child, enters key-rest (one unit for every node) or runs through
        key-other's UTF-8 continuation nodes (proven once). First each node's own unit
        (shared by every state holding the node), then all nodes together."""
        cache = self._proven.setdefault(sl.name, {})
        nodes = sorted({n for n, _st in configs})
        units = [self.closure_unit(n, None) for n in nodes]
        if len(units) > 1:
            units.append(tuple(sorted({c for u in units for c in u})))
        for unit in units:
            hit = cache.get(unit)
            if hit is None:
                if not unit or not self._covers(unit, sl):
                    hit = cache[unit] = False
                elif not self._as_parts(unit, sl.first_bytes, cache, self._parts.setdefault(sl.name, {})):
                    hit = cache[unit] = True  # every part proven (a state at a known trie node)
                else:
                    hit = cache[unit] = False if self._killed(unit, sl, cache) else \
                        self._prove(unit, sl, cache, FREE_BUDGET, self._free_spans)
            if hit:
                return True
        return False

    def _killed(self, unit, sl, cache) -> bool:
        """Whether repeating the slice's first character, or "a " (a word and a space),
        kills the unit (then it is refuted at the cost of one path; a unit met on the way
        that is already refuted counts as killed). The unit after each byte is the union
        of the successors (subset construction). Bounded strings (a length product, a
        counter near its bound, a limit on the words: ``(\\S+\\s+){0,99}\\S+``) are why:
        the proof would explore every position up to the bound, twice per position where
        alternatives overlap, before its budget runs out; the probe walks one path to
        the death. Nesting past the limit: not killed (the proof decides)."""
        periods = [bytes(r[0] for r in sl.utf8_seqs[0])]
        if sl.first_bytes >> 0x20 & sl.first_bytes >> 0x61 & 1:
            periods.append(b"a ")
        try:
            return any(self._probe(unit, cache, p) for p in periods)
        except AutomatonLimit:
            return False

    def _probe(self, unit, cache, char) -> bool:
        """Whether repeating the bytes `char` kills the unit (_killed). When the walk
        reaches the death, every unit it met at the start of a repetition dies on the
        same string and is cached as refuted: the states of a long bounded string (one
        per count) then each walk to the first refuted unit, not to the bound."""
        seen, u = {}, unit
        for _ in range(PROBE_CHARS):
            if u in seen or cache.get(u) is True:
                return False
            if cache.get(u) is False:
                return True
            seen[u] = None
            prev = u
            for b in char:
                nxt = set()
                for n, st in u:
                    st = self._a.byte_stack(n, st)  # a length region's character count
                    for lo, stop, targets in self._a.template(n) if st != -1 else ():
                        if lo <= b < stop:
                            for t in targets:
                                nxt.update(self.closure_unit(t, st))
                            break
                if not nxt:
                    cache.update(dict.fromkeys(seen, False))
                    return True
                u = tuple(sorted(nxt))
            if self.chains:
                u = self.chains.jump(prev, u, len(char))
        return False

    def _covers(self, unit, sl) -> bool:
        covered = 0
        for cfg in unit:
            covered |= self._cfg_bytes(cfg)
        return not sl.first_bytes & ~covered

    def _prove(self, unit, sl, cache, budget=PROOF_BUDGET, spans=None) -> bool:
        """unbounded's search and fixpoint; caches the units it settles. spans: the memo
        of _spans ((configuration, bytes) -> pieces), for this proof unless given."""
        tails, tries, unit_of = self._tails(sl), self.tries, self.closure_unit
        if spans is None:
            spans = {}
        parts = self._parts.setdefault(sl.name, {})  # (configuration,) -> whether its part holds
        needs = {}  # pair -> [[pairs, one of which must hold], ...]
        marks = {}  # key trie mark -> a pair of a node with that mark whose part this proof settles
        todo, complete, failed = [(unit, ())], True, False  # failed: some requirement lost an option
        while todo:
            pair = todo.pop()
            if pair in needs:
                continue
            check_deadline()
            if len(needs) >= budget:
                complete = False
                break
            u, rest = pair
            if rest is None:  # a part: the slice characters that start on u's one configuration
                known = parts.get(u)
            else:
                known = cache.get(u) if not rest else None
                if known is None and not rest and not self._covers(u, sl):
                    known = cache[u] = False
            if known is not None:
                needs[pair] = [] if known else [[]]
                failed = failed or not known
                continue
            needs[pair] = reqs = []
            try:
                one = None
                if rest is None:
                    one = tries.trie_units(u[0], sl.first_bytes, unit_of)
                    if one is not None:  # its verdict goes to every such node of its trie
                        marks.setdefault(one[0], pair)
                        one = one[1]
                    else:
                        one = tries.ascii_units(u[0], sl.first_bytes, unit_of)
                if one is not None:  # a stack-free part on one-byte characters only (a key trie node)
                    for v in one:
                        for req in self._as_parts(v, sl.first_bytes, cache, parts) if v else ([],):
                            failed = failed or not req
                            reqs.append(req)
                            todo.extend(req)
                    continue
                split = self._split(u, sl.first_bytes) if rest == () and len(u) > 1 else None
                if split is not None:  # each configuration's part is required (and proven) on its own
                    reqs.extend([(c, None)] for c in split)
                    todo.extend((c, None) for c in split)
                    continue
                ps = self._pieces(u, sl.first_bytes if not rest else -1, spans)
            except AutomatonLimit:  # nesting too deep: no proof (the state search decides)
                reqs.append([])
                failed = True
                continue
            if rest:  # inside a character: one byte range, one tail
                opts_list = _within(ps, rest[0][0], rest[0][1])
                if opts_list is None:
                    reqs.append([])
                    failed = True
                    continue
                made = {(opts, rest[1:]) for opts in opts_list}
            else:  # at a boundary (_covers saw an edge on every first byte): each piece's tails
                made = {(opts, tail) for a, b, opts in ps for tail in (_ONE if b <= 0x80 else tails(a, b))}
            for opts, tail in made:  # byte ranges with the same successors are required once
                if tail and len(opts) > 1:  # inside a character: the union of the targets goes on
                    req = [(tuple(sorted(set().union(*opts))), tail)]  # (an é beside a class of é-like ones)
                elif tail or len(opts) != 1:
                    req = [(v, tail) for v in opts]
                else:  # one unit at a boundary: required as its parts (each proven once)
                    for req in self._as_parts(opts[0], sl.first_bytes, cache, parts):
                        reqs.append(req)
                        todo.extend(req)
                    continue
                failed = failed or not req
                reqs.append(req)
                todo.extend(req)
        self._complete = complete
        # explored to the end with every requirement keeping an option: all hold (the
        # fixpoint would drop nothing)
        holds = dict.fromkeys(needs, True) if complete and not failed else _greatest_fixpoint(needs)
        for (u, rest), ok in holds.items():
            if ok or complete:
                if rest is None:
                    parts[u] = ok
                elif not rest:
                    cache[u] = ok
        if marks:  # the inner nodes (leaves) of a trie have the same requirements (trie_units)
            tries.spread(marks, holds, complete, parts)
        return holds[(unit, ())]

    def _as_parts(self, unit, bits, cache, parts):
        """Requirements that together say what [(unit, ())] says, for a boundary unit:
        when the unit covers `bits` and splits (_split), one per part not yet proven
        (the requirements of a pair all hold together: a key trie child's unit is its
        node's part, key-other's part is required once), else [[(unit, ())]]."""
        whole = [[(unit, ())]]
        if len(unit) < 2 or unit in cache:
            return whole
        seen, out, nb, tick = 0, [], self._bytes, self._tick
        for cfg in unit:
            n = cfg[0]
            b = None if n in tick else nb.get(n)  # _cfg_bytes, inlined for the common case
            b = (self._cfg_bytes(cfg) if b is None else b) & bits
            if not b:
                continue
            if seen & b:
                return whole
            seen |= b
            if parts.get((cfg,)) is not True:
                out.append([((cfg,), None)])
        return whole if bits & ~seen else out

    def _split(self, unit, bits):
        """The unit's configurations as parts ((configuration,), ...) when no byte of
        `bits` is in the classes of two of them, else None. Then the unit's requirements
        are the union of its configurations' own, so each configuration's part is
        proven once and shared by every unit that holds it (key-other's start is in
        every unit of a key trie: its wide characters are required once per grammar,
        not once per trie node)."""
        seen, out = 0, []
        for cfg in unit:
            b = self._cfg_bytes(cfg) & bits
            if b:
                if seen & b:
                    return None
                seen |= b
                out.append((cfg,))
        return out

    def _tails(self, sl):
        """tails(a, b): the rests of the slice characters whose first byte is in a..b-1
        (a set of tuples of byte ranges), cached per slice and range."""
        hit = self._tail_fns.get(sl.name)
        if hit is None:
            by_byte = [set() for _ in range(256)]
            for seq in sl.utf8_seqs:
                for b in range(seq[0][0], seq[0][1] + 1):
                    by_byte[b].add(tuple(seq[1:]))
            memo = {}

            def hit(a, b):
                key = a * 257 + b
                out = memo.get(key)
                if out is None:
                    out = memo[key] = frozenset().union(*by_byte[a:b])
                return out
            self._tail_fns[sl.name] = hit
        return hit

    def closure_unit(self, t, st, depth=0):
        """The unit of (t, st)'s closure (sorted, canonical stacks; () when it has no
        configuration with a byte edge), cached. st None: the stack-free unit (the nodes
        of the part of t's closure that stays above any stack, each with stack None)."""
        key = (t, st)
        hit = self._units.get(key)
        if hit is None and st is None:
            hit = self._units[key] = self._free_unit(t, depth)
        if hit is None:
            configs = self._a.closure(t, st)[0]
            canon = self._canon_stack
            if canon is not None:
                configs = {(m, canon(x)) for m, x in configs}
            hit = self._units[key] = tuple(sorted(set(configs)))
        return hit

    def _free_unit(self, t, depth):
        """closure_unit(t, None): the nodes of Closures.relative(t), assembled from
        the units of the rules t's closure calls (each computed once) when no callee can
        end without consuming and no counter or length region is entered (a key trie node: itself plus
        key-other's unit), else read from Closures.relative (also past FREE_CALL_DEPTH callees
        nested at once: the Python stack)."""
        nfa, a = self._a.nfa, self._a
        edges, eps, call, counter = nfa.edges, nfa.eps, nfa.call, nfa.counter
        out, seen, todo = set(), {t}, [t]
        while todo:
            x = todo.pop()
            if x in counter or x in nfa.length:
                out = None
                break
            if edges[x]:
                out.add((x, None))
            c = call.get(x)
            if c is not None:
                if depth >= FREE_CALL_DEPTH or a.closures.relative(c[0])[1]:  # the callee may return at once
                    out = None
                    break
                out.update(self.closure_unit(c[0], None, depth + 1))
            for y in eps[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        if out is None:
            out = {(m, None) for m, _rel in a.closures.relative(t)[0]}
        return tuple(sorted(out))

    def _spans(self, cfg, bits, memo):
        """cfg's byte classes that meet the bytes in the bit set `bits` (-1: all), with their
        target units: ((start, stop, units (a sorted tuple)), ...). Only those: the closures after a
        quote or a backslash (the end of a key, with its whole enclosing grammar) are
        never needed when no slice character starts there."""
        key = (cfg, bits)
        hit = memo.get(key)
        if hit is None:
            n, st = cfg
            unit_of = self.closure_unit
            st = self._a.byte_stack(n, st)  # a length region's character count (-1: dies)
            out = []
            for a, b, targets in self._classes(n) if st != -1 else ():
                if bits & ((1 << b) - (1 << a)):
                    if len(targets) == 1:
                        u = unit_of(targets[0], st)
                        out.append((a, b, (u,) if u else ()))
                    else:
                        out.append((a, b, tuple(sorted({unit_of(t, st) for t in targets} - {()}))))
            hit = memo[key] = tuple(out)
        return hit

    def _classes(self, n):
        """automaton.template(n), read off the edges when no two overlap (a key trie
        node: one edge per child and per range of its other characters), else the
        automaton's (cached) template."""
        edges = self._a.nfa.edges[n]
        if len(edges) > 1:
            srt = sorted(edges)
            if all(srt[k][1] < srt[k + 1][0] for k in range(len(srt) - 1)):
                return tuple((lo, hi + 1, (t,)) for lo, hi, t in srt)
        return self._a.template(n)

    def _pieces(self, unit, bits, memo):
        """The unit's byte classes within `bits`: ((start, stop, target units), ...), sorted
        and disjoint, where the target units (a sorted tuple, () when no target has a
        configuration) are the same for every byte of start..stop-1; bytes without an
        edge are left out. A configuration's classes are computed once per proof
        (key-other's start is in every unit of a key trie)."""
        if len(unit) == 1:
            return self._spans(unit[0], bits, memo)
        spans = sorted(x for cfg in unit for x in self._spans(cfg, bits, memo))
        if all(spans[k][1] <= spans[k + 1][0] for k in range(len(spans) - 1)):  # no byte in two classes
            return tuple(spans)
        cuts = sorted({a for a, _b, _o in spans} | {b for _a, b, _o in spans})
        pos = {c: i for i, c in enumerate(cuts)}
        opts = [None] * (len(cuts) - 1)
        for a, b, units in spans:
            for k in range(pos[a], pos[b]):
                if opts[k] is None:
                    opts[k] = set(units)
                else:
                    opts[k].update(units)
        return tuple((cuts[k], cuts[k + 1], tuple(sorted(o))) for k, o in enumerate(opts) if o is not None)


_ONE = ((),)  # the tails of a one-byte character


def _within(pieces, lo, hi):
    """The target units of each piece overlapping the bytes lo..hi, or None when some byte
    of lo..hi is in no piece."""
    out, at = [], lo
    for a, b, opts in pieces:
        if b <= lo or a > hi:
            continue
        if a > at:
            return None
        at = b
        out.append(opts)
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
