"""Slice bounds: how deep a state provably allows any string of slice characters.

SliceBounds receives the automaton (automaton.LazyAutomaton). slice_depth(s, sl) is a
lower bound of the number of characters of sl (a token_slices.TokenSlice, e.g. "JSON
string character") that every string may have and still leave s alive; masks.TokenMasks
then ORs in the slice's bitmask for that length and walks only the rest of the
vocabulary. A lower bound is always safe (a search cut short only means walking more of
the trie). The bound comes from a search over automaton states (stepping each
character over configuration sets: it interns the states after whole characters and
expands none), or, for a configuration that survives every slice string (a
key-exclusion trie, a string body), from a proof over NFA configurations that builds
no state (slice_proof.SliceProof). The search looks at most sl.max_level characters
ahead, so it takes the states it meets in the horizon form (slice_horizon.SliceHorizon:
alike for that many characters; its result then capped there).
"""

from __future__ import annotations

from .automaton import LazyAutomaton
from .copy_chains import shift
from .slice_horizon import SliceHorizon
from .slice_proof import UNBOUNDED, SliceProof
from .stacks import CUT_RET, AutomatonLimit

SLICE_BUDGET = 24  # new slice steps one search may spend
SLICE_BUDGET_TOTAL = 400  # ... one mask, nested searches included
TIGHT_STATES = 64  # states one SliceBounds.tight may meet
MAX_MOVES = 1 << 14  # cached configuration-set moves (_move) per grammar (~400 B each), then they start over


class SliceBounds:
    """slice_depth(s, sl), memoised per slice. Called under the automaton's lock (from
    masks.TokenMasks), like everything that grows the automaton."""

    def __init__(self, automaton: LazyAutomaton):
        self._a = automaton
        self.proof = SliceProof(automaton)
        self._canon = automaton.canonical if automaton.nfa.counter or automaton.nfa.length else None  # states searched by canonical form
        self._steps: dict[str, dict] = {}  # slice name -> {state: _step(state)}
        self._moves: dict[tuple, tuple | None] = {}  # (configurations, lo, hi) -> _move(...)
        self._depth: dict[str, dict] = {}  # slice name -> {state: slice_depth(state)}
        self._budget = 0
        self._unsure = True  # whether the last cut search (slice_depth) may have left a string unexplored or met a rule end
        self._mid_end: set[int] = set()  # states whose _step met an accepting set inside a character
        self._abs_stack: dict[int, int | None] = {}  # stack -> innermost call frame cut (see _config_bound)
        self._abs_single: dict[tuple, int] = {}  # configuration -> its abstract single-configuration state
        self._abs_all: dict[str, dict] = {}  # slice name -> {state: whether its abstract configurations are proven}
        self._below: dict[int, tuple] = {}  # state -> _counter_cut(state)
        self._cut_verdict: dict[tuple, bool] = {}  # (slice name, counter node) -> whether its cut proved as much
        self._chains = self.proof.chains  # chains of copies in length regions (copy_chains.py)
        self.horizon = SliceHorizon(automaton, self.proof)  # the states' forms for the search's L characters

    def _step(self, s: int, sl):
        """(dies, successors): whether some character of the slice leads from s to the
        dead state, else the states after one slice character. Cached per state. A
        character is followed over configuration sets (_move), not over automaton
        states: only the states after whole characters are interned, none is expanded
        (a state of several configurations meets ~13 distinct sets inside UTF-8
        characters per slice step, each a ~50-70 us expansion as a state), except from
        a state that has its row (_step_rows)."""
        cache = self._steps.setdefault(sl.name, {})
        hit = cache.get(s)
        if hit is not None:
            return hit
        a = self._a
        if a.expanded[s]:
            res = self._step_rows(s, sl)
        else:
            down = self._chains.down(a.configs[s], 1) if self._chains else None
            if down is None:
                res = self._step_sets(s, sl)
            else:  # the step of the state a few copies down the chain, its successors moved back up
                configs, first, end, by = down
                low = a.intern(configs, a.accepting[s])
                dies, succ = self._step(low, sl)
                if low in self._mid_end:
                    self._mid_end.add(s)
                res = (dies, tuple({a.intern(shift(a.configs[y], first, end, by), a.accepting[y]) for y in succ}))
        cache[s] = res
        return res

    def _step_rows(self, s: int, sl):
        """_step through the automaton's rows, expanding the states inside UTF-8
        characters: for a state whose mask is walked (its row is built), whose walk
        expands most of them anyway (the rest trie's tokens that start with a wide
        character)."""
        a = self._a
        succ = set()
        rows = {}  # (state, lo, hi) -> successor set (the UTF-8 sequences share prefixes)
        for seq in sl.utf8_seqs:
            cur = (s,)
            for k, (lo, hi) in enumerate(seq):
                nxt = set()
                for u in cur:
                    key = (u, lo, hi)
                    r = rows.get(key)
                    if r is None:
                        full = rows.get(u)
                        if full is None:
                            a.expand(u)
                            full = rows[u] = a.trans[u].tolist()
                        r = rows[key] = set(full[lo : hi + 1])
                    nxt |= r
                if 0 in nxt:
                    return True, ()
                if k < len(seq) - 1 and any(a.accepting[u] for u in nxt):  # a rule end inside a character
                    self._mid_end.add(s)
                cur = nxt
            succ |= cur
        return False, tuple(succ)

    def _step_sets(self, s: int, sl):
        """_step over configuration sets (_move): the states after whole characters are
        interned, none is expanded."""
        a = self._a
        intern, move = a.intern, self._move
        succ = set()
        start = (a.configs[s],)
        for seq in sl.utf8_seqs:
            cur = start
            for lo, hi in seq[:-1]:
                nxt = set()
                for cfgs in cur:
                    m = move(cfgs, lo, hi)
                    if m is None:
                        return True, ()
                    for c, acc in m:
                        nxt.add(c)
                        if acc:
                            self._mid_end.add(s)
                cur = nxt
            lo, hi = seq[-1]
            for cfgs in cur:
                m = move(cfgs, lo, hi)
                if m is None:
                    return True, ()
                for c, acc in m:
                    succ.add(intern(c, acc))
        return False, tuple(succ)

    def _move(self, cfgs, lo, hi):
        """The configuration sets after one byte of lo..hi from the configurations cfgs:
        ((configurations (a sorted tuple), accept), ...), one per distinct successor, or
        None when some byte of lo..hi leads to the dead state (the automaton's
        transition, automaton.expand / _step_byte: the closure of the byte's targets,
        a length region's count on the stack). Cached grammar-wide."""
        key = (cfgs, lo, hi)
        hit = self._moves.get(key, False)
        if hit is not False:
            return hit
        a = self._a
        template, byte_stack = a.template, a.byte_stack
        stop = hi + 1
        groups = {}  # target pairs of each run of bytes (a run without any: the move dies)
        if len(cfgs) == 1:  # a node's byte classes are disjoint and sorted: the runs as they are
            n, st = cfgs[0]
            st = byte_stack(n, st)
            at = lo
            if st >= 0:
                for x, y, targets in template(n):
                    if y <= lo:
                        continue
                    if x > at:  # a gap (or past the range)
                        break
                    groups[tuple([(t, st) for t in targets])] = None
                    at = y
                    if at >= stop:
                        break
            ok = at >= stop
        else:
            pieces, cuts = [], {lo, stop}
            for n, st in cfgs:
                st = byte_stack(n, st)
                if st < 0:
                    continue
                for x, y, targets in template(n):
                    if y <= lo:
                        continue
                    if x >= stop:
                        break
                    x, y = max(x, lo), min(y, stop)
                    cuts.add(x)
                    cuts.add(y)
                    pieces.append((x, y, [(t, st) for t in targets]))
            cuts = sorted(cuts)
            pos = {c: k for k, c in enumerate(cuts)}
            runs = [set() for _ in range(len(cuts) - 1)]
            for x, y, ps in pieces:
                for k in range(pos[x], pos[y]):
                    runs[k].update(ps)
            ok = all(runs)
            if ok:
                groups = dict.fromkeys(tuple(sorted(r)) for r in runs)
        res = None
        if ok:
            out = {}
            for pairs in groups:
                configs, accept = a.closure_of(pairs)
                if not configs and not accept:
                    break
                out[(tuple(sorted(configs)), accept)] = None
            else:
                res = tuple(out)
        if len(self._moves) >= MAX_MOVES:
            self._moves.clear()
        self._moves[key] = res
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
                d = self._search(ab, sl, level)
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

    def _counter_cut(self, s: int) -> tuple:
        """(s with the lowest counter frame under which every configuration sits cut
        (that frame and all below it replaced by the context frame), the counter's node),
        or (s, None) when there is none. A character's or a word's counter frame stays in
        the abstract states of masks.py (the count decides which tokens leave the rule),
        and an item's counter frame lies under every call frame of the item's own (a
        string value's lexeme), so a state under it is a new state for every count; but a
        slice string that would return through the counter's body end dies in the cut state
        (a lower bound), and inside a JSON string none can (a slice character is no quote),
        so the cut state's depth is the same, and shared by every item. Length frames are never cut (a tick node and
        Closures.live read the top frame's count; a length region holds no counter)."""
        hit = self._below.get(s)
        if hit is not None:
            return hit
        a = self._a
        frames, configs = a.stacks.frames, a.configs[s]
        res = (s, None)
        if configs:
            low, x = 0, a.stacks.base_of(configs)
            while x and frames[x][0] != CUT_RET:
                if frames[x][2] and frames[x][0] in a.nfa.counter:
                    low = x
                x = frames[x][1]
            if low:
                res = (a.intern(a.stacks.rebased(configs, low, a.cut), False), frames[low][0])
        self._below[s] = res
        return res

    def slice_depth(self, s: int, sl) -> int:
        """A lower bound of d, the largest n such that every string of at most n slice
        characters leads from s to a live state (_search). A state under a counter frame
        is first searched with that frame cut (_counter_cut: the same cut state for every
        count, searched once). The first time that proves less than sl.max_level under a
        counter, s itself is searched too: if that proves more, the counter is not cut
        again for this slice (a word counter whose body ends within a few characters),
        else the cut's bound is taken from then on (a string near its word limit)."""
        hit = self._depth.setdefault(sl.name, {}).get(s)
        if hit is not None:
            return hit
        self._budget = SLICE_BUDGET_TOTAL
        cut, node = self._counter_cut(s)
        verdict = self._cut_verdict.get((sl.name, node))
        if cut == s or verdict is False:
            return self._search(s, sl, 0)
        self._unsure = False
        d = self._search(cut, sl, 0)
        if d >= sl.max_level or verdict or not self._unsure:
            # not unsure: the cut search met a dying string and no string that reached the
            # counter's body end (an accepting state), so s dies on that string too
            if verdict is None and not self._unsure:
                self._cut_verdict[(sl.name, node)] = True
            self._depth[sl.name][s] = d
            return d
        self._budget = SLICE_BUDGET_TOTAL
        own = self._search(s, sl, 0)
        # False: the body's end is met within max_level characters, the cut only costs
        self._cut_verdict[(sl.name, node)] = own <= d
        return max(own, d)

    def tight(self, s: int, sl, r: int) -> bool:
        """Whether every string of r + 1 slice characters kills s and none of at most r
        meets an accepting state on the way (inside an abstract state, a rule end whose
        continuation might take more slice characters). Asked where slice_depth(s) = r
        is below sl.max_level: s's depth is then exactly r, so the slice's tokens of at
        most r characters are all allowed, its longer ones all refused, and a mask walks
        only the tokens outside the slice (TokenSlice.exact). Without it, a string a few
        characters short of its maxLength walked every trie node down to that depth.
        A breadth-first walk over the states after each whole character (_step, cached
        per state: the next count's check meets the same states), level by level (a
        state met at two levels must die at the last one too), over at most TIGHT_STATES
        states; the last level must take no byte that starts a slice character."""
        a = self._a
        accepting = a.accepting
        level, met = {s}, 1
        for _ in range(r):
            nxt = set()
            for x in level:
                if accepting[x]:
                    return False
                dies, succ = self._step(x, sl)
                if dies or x in self._mid_end:
                    return False
                nxt.update(succ)
            met += len(nxt)
            if met > TIGHT_STATES:
                return False
            level = nxt
        takes, first = self.proof._cfg_bytes, sl.first_bytes
        return not any(accepting[x] or any(takes(c) & first for c in a.configs[x]) for x in level)

    def _search(self, s: int, sl, nested: int) -> int:
        """A lower bound of d, the largest n such that every string of at most n slice
        characters leads from s to a live state (UNBOUNDED when the search closes: every
        state reachable through slice characters was seen and none dies). A breadth-first
        search over slice characters, cut at sl.max_level levels, at states already
        measured (memoised), and after SLICE_BUDGET new per-state steps (then the levels
        completed so far are the bound: smaller is always safe, it only means walking
        more of the trie). States are taken by their canonical form (a counter deep in
        its range is one state), sound because the search spans less than a token, or
        by the horizon form (self.horizon) for top characters."""
        memo = self._depth.setdefault(sl.name, {})
        hit = memo.get(s)
        if hit is not None:
            self._unsure = True
            return hit
        steps = self._steps.setdefault(sl.name, {})
        top = sl.max_level
        if self._chains:  # a state in a chain's copies: the one at the same place in the first copy
            c = self.horizon.down(s, top)
            if c != s:
                d = memo[s] = min(self._search(c, sl, nested), top)
                return d
        base, near, chains, copy_shift = self._canon, self.horizon.form, self._chains, self.horizon.down
        capped = False  # some state met was taken alike for top characters only: the result capped there
        canon = None
        if base is not None or chains:

            def canon(y):
                nonlocal capped
                if base is not None:
                    y, moved = near(base(y), top)
                    capped = capped or moved
                if chains:
                    z = copy_shift(y, top)
                    capped = capped or z != y
                    y = z
                return y
        lb = self._config_bound(s, sl, memo, nested + 1)
        if lb >= top:
            memo[s] = lb
            return lb
        best = UNBOUNDED
        local = SLICE_BUDGET
        accepting = self._a.accepting
        level, seen = [s], {s}
        for i in range(top):
            nxt = []
            for x in level:
                m = memo.get(x) if x != s else None
                if m is not None:
                    best = min(best, i + m)
                    self._unsure = True
                    continue
                if x != s:
                    m = self._config_bound(x, sl, memo, nested + 1)
                    if i + m >= top:
                        best = min(best, i + m)
                        self._unsure = True
                        continue
                if x not in steps:
                    if self._budget <= 0 or local <= 0:
                        best = min(best, i)
                        self._unsure = True
                        break
                    self._budget -= 1
                    local -= 1
                dies, succ = self._step(x, sl)
                if dies:
                    best = min(best, i)
                    continue
                if x in self._mid_end:
                    self._unsure = True
                for y in succ:
                    if accepting[y]:
                        self._unsure = True
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
        best = max(min(best, top if capped else UNBOUNDED), lb)
        memo[s] = best
        return best

