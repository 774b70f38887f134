"""Slice bounds: how deep a state provably allows any string of slice characters.

SliceBounds receives the automaton (automaton.LazyAutomaton). slice_depth(s, sl) is a
lower bound of the number of characters of sl (a tokenizer.TokenSlice, e.g. "JSON
string character") that every string may have and still leave s alive; masks.TokenMasks
then ORs in the slice's bitmask for that length and walks only the rest of the
vocabulary. A lower bound is always safe (a search cut short only means walking more of
the trie). The bound comes from a search over automaton states (which interns and
expands states like any walk), or, for a configuration that survives every slice
string (a key-exclusion trie, a string body), from a proof over NFA configurations
that builds no state (slice_proof.SliceProof).
"""

from __future__ import annotations

from .automaton import LazyAutomaton
from .slice_proof import UNBOUNDED, SliceProof
from .stacks import CUT_RET, AutomatonLimit

SLICE_BUDGET = 24  # new slice steps one search may spend
SLICE_BUDGET_TOTAL = 400  # ... one mask, nested searches included


class SliceBounds:
    """slice_depth(s, sl), memoised per slice. Called under the automaton's lock (from
    masks.TokenMasks), like everything that grows the automaton."""

    def __init__(self, automaton: LazyAutomaton):
        self._a = automaton
        self.proof = SliceProof(automaton)
        self._canon = automaton.canonical if automaton.nfa.counter or automaton.nfa.length else None  # states searched by canonical form
        self._steps: dict[str, dict] = {}  # slice name -> {state: _step(state)}
        self._depth: dict[str, dict] = {}  # slice name -> {state: slice_depth(state)}
        self._budget = 0
        self._abs_stack: dict[int, int | None] = {}  # stack -> innermost call frame cut (see _config_bound)
        self._abs_single: dict[tuple, int] = {}  # configuration -> its abstract single-configuration state
        self._abs_all: dict[str, dict] = {}  # slice name -> {state: whether its abstract configurations are proven}

    def _step(self, s: int, sl):
        """(dies, successors): whether some character of the slice leads from s to the
        dead state, else the states after one slice character. Cached per state."""
        cache = self._steps.setdefault(sl.name, {})
        hit = cache.get(s)
        if hit is not None:
            return hit
        succ = set()
        res = None
        a = self._a
        expanded, expand = a.expanded, a.expand
        rows = {}  # (state, lo, hi) -> successor set (the UTF-8 sequences share prefixes)
        for seq in sl.utf8_seqs:
            cur = (s,)
            for lo, hi in seq:
                nxt = set()
                for u in cur:
                    key = (u, lo, hi)
                    r = rows.get(key)
                    if r is None:
                        full = rows.get(u)
                        if full is None:
                            if not expanded[u]:
                                expand(u)
                                expanded = a.expanded
                            full = rows[u] = a.trans[u].tolist()
                        r = rows[key] = set(full[lo : hi + 1])
                    nxt |= r
                if 0 in nxt:
                    res = (True, ())
                    break
                cur = nxt
            if res is not None:
                break
            succ |= cur
        if res is None:
            res = (False, tuple(succ))
        cache[s] = res
        return res

    def _abstract_stack(self, st):
        """st with its innermost call frame replaced by the context frame (counter frames
        above it kept), or None when st has no call frame."""
        hit = self._abs_stack.get(st, -1)
        if hit != -1:
            return hit
        stacks = self._a.stacks
        frames = stacks.frames
        counters, x = [], st
        while x and frames[x][2]:
            counters.append(frames[x])
            x = frames[x][1]
        if not x:
            res = None
        elif frames[x][0] == CUT_RET:
            res = st
        else:
            res = self._a.cut
            for ret, _parent, k in reversed(counters):
                res = stacks.push(ret, res, k)
        self._abs_stack[st] = res
        return res

    def _config_bound(self, x, sl, memo, level):
        """max over the configurations c of x of the slice depth of c alone, inside the
        rule it is in (its stack cut at the innermost call: a slice string that would
        return from that rule counts as dying). A lower bound of x's depth (x is live
        if any of its configurations is), shared by every call site of the rule: the
        same key-rest / string rule called from a hundred places is measured once.
        Each single is first tried by the proof (slice_proof, cached per configuration),
        then by the state search."""
        a, proof = self._a, self.proof
        configs = a.configs
        if proof.free_unbounded(configs[x], sl):  # whatever the stacks (a key trie, a string body)
            return UNBOUNDED
        best = 0
        singles = self._abs_single
        top = sl.max_level
        alone = False  # whether some configuration has an edge on every first byte
        for c in configs[x]:
            ab = singles.get(c)
            if ab is None and not proof.node_covers(c[0], sl):
                ab = singles[c] = 0
            alone = alone or ab != 0
            if ab is None:
                st = self._abstract_stack(c[1])
                ab = singles[c] = 0 if st is None or st == c[1] else a.intern([(c[0], st)], False)
            if not ab:
                continue
            d = memo.get(ab)
            if d is None and proof.unbounded(configs[ab], sl):
                d = memo[ab] = UNBOUNDED
            if d is None:
                if level > 1 or self._budget <= 0:  # inside another single's search, or out of budget
                    continue
                d = self.slice_depth(ab, sl, nested=level)
            if d > best:
                best = d
                if best >= top:
                    break
        if best < top and not alone and len(configs[x]) > 1 and self._all_unbounded(x, sl):
            best = UNBOUNDED
        return best

    def _all_unbounded(self, x, sl) -> bool:
        """Whether the configurations of x, each cut at its innermost call as in
        _config_bound, together survive every slice string (slice_proof). Tried when no
        configuration alone has an edge on every first slice byte: a key trie's state is
        its trie node (ASCII characters) plus the shared key-other rule (the rest), and
        neither alone survives. First each configuration's own closure (a trie node's
        is the trie node and key-other's start: the unit its trie's proof settled, shared
        by every state that is at that trie node, whatever else it holds), then all of
        them. Configurations without a call frame, or already abstract, are taken as
        they are (the proof counts a rule's end as dying)."""
        memo = self._abs_all.setdefault(sl.name, {})
        hit = memo.get(x)
        if hit is None:
            proof = self.proof
            cut = []
            for n, st in self._a.configs[x]:
                ab = self._abstract_stack(st)
                cut.append((n, st if ab is None else ab))
            hit = False
            for n, st in cut:
                try:
                    u = proof.closure_unit(n, st)
                except AutomatonLimit:  # the closure nests too deep: no unit of its own
                    continue
                if len(u) > 1 and proof.unbounded(u, sl):
                    hit = True
                    break
            if not hit:
                hit = proof.unbounded(cut, sl)
            memo[x] = hit
        return hit

    def slice_depth(self, s: int, sl, nested: int = 0) -> int:
        """A lower bound of d, the largest n such that every string of at most n slice
        characters leads from s to a live state (UNBOUNDED when the search closes: every
        state reachable through slice characters was seen and none dies). A breadth-first
        search over slice characters, cut at sl.max_level levels, at states already
        measured (memoised), and after SLICE_BUDGET new per-state steps (then the levels
        completed so far are the bound: smaller is always safe, it only means walking
        more of the trie). States are taken by their canonical form (a counter deep in
        its range is one state), sound because the search spans less than a token."""
        memo = self._depth.setdefault(sl.name, {})
        hit = memo.get(s)
        if hit is not None:
            return hit
        steps = self._steps.setdefault(sl.name, {})
        canon = self._canon
        top = sl.max_level
        if not nested:
            self._budget = SLICE_BUDGET_TOTAL
        lb = self._config_bound(s, sl, memo, nested + 1)
        if lb >= top:
            memo[s] = lb
            return lb
        best = UNBOUNDED
        local = SLICE_BUDGET
        level, seen = [s], {s}
        for i in range(top):
            nxt = []
            for x in level:
                m = memo.get(x) if x != s else None
                if m is not None:
                    best = min(best, i + m)
                    continue
                if x != s:
                    m = self._config_bound(x, sl, memo, nested + 1)
                    if i + m >= top:
                        best = min(best, i + m)
                        continue
                if x not in steps:
                    if self._budget <= 0 or local <= 0:
                        best = min(best, i)
                        break
                    self._budget -= 1
                    local -= 1
                dies, succ = self._step(x, sl)
                if dies:
                    best = min(best, i)
                    continue
                for y in succ:
                    if canon is not None:
                        y = canon(y)
                    if y not in seen:
                        seen.add(y)
                        nxt.append(y)
            if i + 1 >= best or not nxt:
                break
            level = nxt
        else:
            best = min(best, top)  # frontier still open after max_level levels
        best = max(min(best, UNBOUNDED), lb)
        memo[s] = best
        return best

