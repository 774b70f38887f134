"""The lazy byte automaton and its cached token masks.

A state is a set of parser configurations ``(nfa node, stack)``; a stack is an
interned persistent list of return nodes (id 0 = empty). For a regular language
(regex, choices, non-recursive grammars: most JSON schemas) stacks stay bounded and
this is plain lazy subset construction of a DFA; for recursive grammars it is the same
construction over the configurations of the pushdown automaton, materialised only
where a walk goes (each distinct nesting context is its own state). State 0 is dead.

Per state, on first use:
- its transition row for all 256 bytes (one computation per byte class);
- its token mask: a walk of the token trie over the transition table (numba DFS in
  _walk.py, or numpy level by level; dead states prune whole subtrees), with the
  vocabulary slices of tokenizer.TokenSlice taken whole where provably allowed; stored
  packed, or sparse when few words are non-zero.
So a matcher step is a copy of a cached row plus a few table lookups; the cost of a
new state is paid once per compiled grammar, not per request. See DESIGN.md.

Thread safety: growing the tables is done under a lock; readers take no lock (rows
are written before a state is marked expanded).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from . import _walk
from .nfa import NFA
from .tokenizer import TokenizerInfo

MAX_CONFIGS = 4096  # configurations in one state (ambiguity bound)
MAX_STACK_DEPTH = 512  # nesting bound
MAX_STATES = 1 << 20  # states per compiled grammar (~1 GB of transition rows)
RESERVE_AFTER = 4096  # past this many states the tables are reserved at MAX_STATES (see _grow)
MAX_JUMP = 4096
SPARSE_WORDS = 256  # masks with at most this many non-zero words are stored sparse
MAX_MASK_BYTES = 256 << 20  # per compiled grammar
CUT_RET = -2  # return node of the context frame of abstract states (see _context)
UNBOUNDED = 1 << 30  # slice depth of a state no slice string can kill
SLICE_BUDGET = int(os.environ.get("FURCA_SLICE_BUDGET", 24))  # new slice steps one search may spend
SLICE_BUDGET_TOTAL = int(os.environ.get("FURCA_SLICE_BUDGET_TOTAL", 400))  # ... one mask, nested searches included


class AutomatonLimit(Exception):
    """A state would exceed MAX_CONFIGS, MAX_STACK_DEPTH or MAX_STATES."""


def _node_template(edges):
    """[(start, stop, target nodes)] over the byte classes of one node's edges."""
    cuts = sorted({0, 256} | {lo for lo, _h, _t in edges} | {hi + 1 for _l, hi, _t in edges})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        targets = tuple(sorted({t for lo, hi, t in edges if lo <= a and b - 1 <= hi}))
        if targets:
            out.append((a, b, targets))
    return out


class LazyAutomaton:
    def __init__(self, nfa: NFA, info: TokenizerInfo):
        self.nfa, self.info = nfa, info
        self.lock = threading.RLock()
        self._stacks = [(-1, -1, 0)]  # id -> (return node, parent id, repetition count)
        self._stack_ids = {}
        self._stack_depth = [0]
        self._closure_cache = {}
        self._rel_cache = {}  # NFA node -> _closure_rel
        self._state_ids = {}
        self._configs = []  # state id -> tuple of (node, stack)
        self.accepting = []  # state id -> bool
        self._cap = 64
        self.trans = np.zeros((self._cap, 256), dtype=np.int32)
        self.expanded = np.zeros(self._cap, dtype=bool)
        self.acc = np.zeros(self._cap, dtype=bool)  # accepting, for the compiled walk
        self.masks: dict[int, object] = {}
        self._canon: dict[int, int] = {}
        self._canon_stack: dict[int, int] = {}
        self._max_token_len = info.max_token_len
        self.mask_bytes = 0
        self._jump: dict[int, bytes] = {}
        self._slice_steps: dict[str, dict] = {}
        self._slice_depth: dict[str, dict] = {}
        self._tmpl: dict[int, list] = {}  # NFA node -> [(lo, hi + 1, target nodes)]
        self._budget = 0
        self._abs_stack: dict[int, int | None] = {}  # stack -> innermost call frame cut (see _config_bound)
        self._abs_single: dict[tuple, int] = {}  # configuration -> its abstract single-configuration state
        self._ctx: dict[int, tuple | None] = {}  # state -> (abstract state, continuation state) or None
        self._cont: dict[int, int] = {}  # context stack -> state after returning from it
        self._abs: dict[int, tuple] = {}  # abstract state -> (mask words, return nodes, trie)
        self._intern((), False)  # dead state 0
        self.expanded[0] = True
        self._cut = self._push(CUT_RET, 0)
        self.start = self._intern(*self._closure_of([(nfa.start, 0)]))

    @property
    def num_states(self):
        return len(self._configs)

    # ---- configurations ------------------------------------------------------------
    def _push(self, ret, parent, count=0):
        key = (ret, parent, count)
        sid = self._stack_ids.get(key)
        if sid is None:
            depth = self._stack_depth[parent] + 1
            if depth > MAX_STACK_DEPTH:
                raise AutomatonLimit(f"nesting deeper than {MAX_STACK_DEPTH}")
            sid = len(self._stacks)
            self._stacks.append(key)
            self._stack_depth.append(depth)
            self._stack_ids[key] = sid
        return sid

    def _closure(self, node, stack):
        """(configs with byte edges, accept) reachable from (node, stack) without consuming."""
        key = (node, stack)
        hit = self._closure_cache.get(key)
        if hit is not None:
            return hit
        nfa = self.nfa
        edges, eps, is_end, call, counter = nfa.edges, nfa.eps, nfa.is_end, nfa.call, nfa.counter
        if not eps[node] and node not in is_end and node not in call and node not in counter:
            res = ((key,) if edges[node] else (), False)  # a plain node (e.g. inside a UTF-8 sequence)
            self._closure_cache[key] = res
            return res
        # the part that stays above `stack` is the same for every stack (_closure_rel, cached
        # per node); only returns below it depend on the stack (followed here, iteratively)
        out, accept = [], False
        push, stacks, cache = self._push, self._stacks, self._closure_cache
        seen = set()
        work = [key]
        while work:
            n0, st0 = work.pop()
            if (n0, st0) in seen:
                continue
            seen.add((n0, st0))
            if (n0, st0) != key:
                sub = cache.get((n0, st0))
                if sub is not None:
                    out.extend(sub[0])
                    accept |= sub[1]
                    continue
            rel_out, returns = self._closure_rel(n0)
            mat = {(): st0}
            for n, rel in rel_out:
                st = mat.get(rel)
                if st is None:
                    st = st0
                    for ret, k in rel:
                        st = push(ret, st, k)
                    mat[rel] = st
                out.append((n, st))
            if returns:
                if st0 == 0:
                    accept = True
                    continue
                ret, parent, k = stacks[st0]
                if k:  # a counter frame: k bodies done
                    body, done, lo, hi = counter[ret]
                    if k < hi:
                        work.append((body, push(ret, parent, k + 1)))
                    if k >= lo:
                        work.append((done, parent))
                elif ret == CUT_RET:  # an abstract state's context: the rule ends here
                    accept = True
                else:
                    work.append((ret, parent))
        res = (tuple(dict.fromkeys(out)), accept)
        cache[key] = res
        return res

    def _closure_rel(self, node):
        """The stack-independent part of node's closure: ((node', frames), ...), returns)
        where frames are the (return node, count) pairs pushed above the caller's stack
        (bottom first), and returns: whether node's rule can end without consuming (pop
        the caller's top frame). Cached per NFA node."""
        hit = self._rel_cache.get(node)
        if hit is not None:
            return hit
        nfa = self.nfa
        edges, eps, call, is_end, is_tail, counter = nfa.edges, nfa.eps, nfa.call, nfa.is_end, nfa.is_tail, nfa.counter
        out, returns = [], False
        start = (node, ())
        seen = {start}
        todo = [start]
        while todo:
            n, rel = todo.pop()
            if edges[n]:
                out.append((n, rel))
            nxt = [(t, rel) for t in eps[n]]
            c = call.get(n)
            if c is not None:
                callee, ret = c
                nxt.append((callee, rel if ret in is_tail else rel + ((ret, 0),)))
            if n in counter:
                body, done, lo, hi = counter[n]
                nxt.append((body, rel + ((n, 1),)))
                if lo == 0:
                    nxt.append((done, rel))
            if n in is_end:
                if not rel:
                    returns = True
                else:
                    ret, k = rel[-1]
                    parent = rel[:-1]
                    if k:
                        body, done, lo, hi = counter[ret]
                        if k < hi:
                            nxt.append((body, parent + ((ret, k + 1),)))
                        if k >= lo:
                            nxt.append((done, parent))
                    else:
                        nxt.append((ret, parent))
            for x in nxt:
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
        res = (tuple(out), returns)
        self._rel_cache[node] = res
        return res

    def _closure_of(self, pairs):
        configs, accept = set(), False
        for n, st in pairs:
            c, a = self._closure(n, st)
            configs.update(c)
            accept |= a
        return configs, accept

    def _intern(self, configs, accept):
        # a sorted tuple of int pairs, not a frozenset: tuples of ints leave the garbage
        # collector's tracking, so big automata do not slow every collection down
        key = (tuple(sorted(set(configs))), accept)
        sid = self._state_ids.get(key)
        if sid is None:
            if len(key[0]) > MAX_CONFIGS:
                raise AutomatonLimit(f"more than {MAX_CONFIGS} parallel parses (grammar too ambiguous)")
            sid = len(self._configs)
            if sid >= MAX_STATES:
                raise AutomatonLimit(f"more than {MAX_STATES} automaton states")
            self._state_ids[key] = sid
            self._configs.append(key[0])
            self.accepting.append(accept)
            if sid >= self._cap:
                self._grow()
            self.acc[sid] = accept
        return sid

    def _grow(self):
        """Doubles the tables; past RESERVE_AFTER states, reserves room for MAX_STATES at
        once instead: np.zeros of that size is a lazily zeroed mapping (pages become
        resident only when rows are written), so a big grammar never pays the copy of a
        64 MB+ table in the middle of a request (a 50-150 ms step)."""
        if self._cap >= RESERVE_AFTER and self._cap < MAX_STATES:
            try:
                trans = np.zeros((MAX_STATES, 256), dtype=np.int32)
            except MemoryError:  # strict overcommit: keep doubling
                trans = None
            if trans is not None:
                n = self._cap
                trans[:n] = self.trans[:n]
                expanded = np.zeros(MAX_STATES, dtype=bool)
                expanded[:n] = self.expanded[:n]
                acc = np.zeros(MAX_STATES, dtype=bool)
                acc[:n] = self.acc[:n]
                self.trans, self.expanded, self.acc, self._cap = trans, expanded, acc, MAX_STATES
                return
        self._cap = min(2 * self._cap, MAX_STATES)
        trans = np.empty((self._cap, 256), dtype=np.int32)
        trans[: len(self.trans)] = self.trans
        expanded = np.zeros(self._cap, dtype=bool)
        expanded[: len(self.expanded)] = self.expanded
        acc = np.zeros(self._cap, dtype=bool)
        acc[: len(self.acc)] = self.acc
        self.trans, self.expanded, self.acc = trans, expanded, acc

    # ---- transitions ---------------------------------------------------------------
    def expand(self, s: int):
        """Computes state s's transition row (idempotent)."""
        if self.expanded[s]:
            return
        with self.lock:
            if self.expanded[s]:
                return
            edges = self.nfa.edges
            configs = self._configs[s]
            if len(configs) == 1:  # most states (one position in a rule): a per-node template
                n, st = configs[0]
                tmpl = self._tmpl.get(n)
                if tmpl is None:
                    tmpl = self._tmpl[n] = _node_template(edges[n])
                memo = {}
                spans = []
                for a, b, targets in tmpl:
                    sid = memo.get(targets)
                    if sid is None:
                        if len(targets) == 1:
                            sid = self._intern(*self._closure(targets[0], st))
                        else:
                            sid = self._intern(*self._closure_of([(t, st) for t in targets]))
                        memo[targets] = sid
                    spans.append((a, b, sid))
                row = self.trans[s]  # after the interning: it may have grown (reallocated) the table
                row[:] = 0
                for a, b, sid in spans:
                    row[a:b] = sid
                self.expanded[s] = True
                return
            cuts = {0, 256}
            for n, _ in configs:
                for lo, hi, _t in edges[n]:
                    cuts.add(lo)
                    cuts.add(hi + 1)
            cuts = sorted(cuts)
            pos = {c: i for i, c in enumerate(cuts)}
            buckets = [[] for _ in range(len(cuts) - 1)]
            for n, st in configs:
                for lo, hi, t in edges[n]:
                    for j in range(pos[lo], pos[hi + 1]):
                        buckets[j].append((t, st))
            memo = {}
            sids = []
            for targets in buckets:
                if targets:
                    key = tuple(targets)
                    sid = memo.get(key)
                    if sid is None:
                        sid = memo[key] = self._intern(*self._closure_of(targets))
                    sids.append(sid)
                else:
                    sids.append(0)
            lens = [b - a for a, b in zip(cuts, cuts[1:])]
            self.trans[s] = np.repeat(np.array(sids, dtype=np.int32), np.array(lens, dtype=np.intp))
            self.expanded[s] = True

    def step(self, s: int, data: bytes) -> int:
        """State after consuming data from s (0 = dead)."""
        for b in data:
            if not self.expanded[s]:
                self.expand(s)
            s = int(self.trans[s, b])
            if s == 0:
                return 0
        return s

    # ---- masks ---------------------------------------------------------------------
    def _canonical(self, s: int) -> int:
        """The state whose mask s shares. A counter frame (x{m,n}, see nfa.py) with count k,
        m <= k and n - k > longest token (in bytes) behaves the same for one token whatever
        k is (each body consumes at least a byte), so such counts are replaced by max(m, 1):
        a long maxLength string needs one mask for its middle, not one per position."""
        c = self._canon.get(s)
        if c is None:
            configs = self._configs[s]
            canon = [(n, self._canonical_stack(st)) for n, st in configs]
            c = s if all(a == b for a, b in zip(canon, configs)) else self._intern(canon, self.accepting[s])
            self._canon[s] = c
        return c

    def _canonical_stack(self, st: int) -> int:
        if st == 0:
            return 0
        c = self._canon_stack.get(st)
        if c is None:
            ret, parent, k = self._stacks[st]
            p = self._canonical_stack(parent)
            if k:
                _body, _done, lo, hi = self.nfa.counter[ret]
                if k >= lo and hi - k > self._max_token_len:
                    k = max(lo, 1)
            c = st if (p, k) == (parent, self._stacks[st][2]) else self._push(ret, p, k)
            self._canon_stack[st] = c
        return c

    def _cached_mask(self, s: int):
        """The stored mask of s: a packed int32 row, or (word indices, words) when at most
        SPARSE_WORDS words are non-zero (most states of a schema allow few tokens).
        The store is bounded by MAX_MASK_BYTES (oldest half dropped, recomputed on use)."""
        if self.nfa.counter:
            s = self._canonical(s)
        m = self.masks.get(s)
        if m is None:
            with self.lock:
                m = self.masks.get(s)
                if m is None:
                    packed = self._compute_mask_ctx(s)
                    nz = np.flatnonzero(packed)
                    m = (nz.astype(np.int32), packed[nz].copy()) if len(nz) <= SPARSE_WORDS else packed
                    size = m[0].nbytes * 2 if isinstance(m, tuple) else m.nbytes
                    if self.mask_bytes + size > MAX_MASK_BYTES:
                        for k in list(self.masks)[: len(self.masks) // 2 + 1]:
                            old = self.masks.pop(k)
                            self.mask_bytes -= old[0].nbytes * 2 if isinstance(old, tuple) else old.nbytes
                        for old in self._abs.values():
                            self.mask_bytes -= old[3]
                        self._abs.clear()
                    self.masks[s] = m
                    self.mask_bytes += size
        return m

    def mask(self, s: int) -> np.ndarray:
        """Packed int32 bitmask (info.num_words) of the tokens allowed in state s."""
        m = self._cached_mask(s)
        if isinstance(m, tuple):
            out = np.zeros(self.info.num_words, dtype=np.int32)
            out[m[0]] = m[1]
            return out
        return m

    def write_mask(self, s: int, out: np.ndarray) -> None:
        """Writes s's mask into the int32 row out (len >= num_words; the rest zeroed)."""
        m = self._cached_mask(s)
        if isinstance(m, tuple):
            out[:] = 0
            out[m[0]] = m[1]
        else:
            n = len(m)
            out[:n] = m
            out[n:] = 0

    # ---- context-independent masks (xgrammar's adaptive token mask cache) -----------
    def _lca(self, x, y):
        d, st = self._stack_depth, self._stacks
        while d[x] > d[y]:
            x = st[x][1]
        while d[y] > d[x]:
            y = st[y][1]
        while x != y:
            x, y = st[x][1], st[y][1]
        return x

    def _context(self, s):
        """(abstract state, continuation state) for s, or None.

        C = the innermost call frame (not a counter frame) below which every
        configuration of s shares its stack: s is "inside the rule called by C", and
        C is the context (who called it, and everything under that). The abstract state
        has the same configurations with C replaced by a context frame that returns to
        nowhere: reaching the rule's end there marks the state accepting instead of
        returning. Its mask is the same for every context, so it is computed once
        (automaton states and all) and shared by every caller, every nesting depth.
        The tokens that pass the rule's end are the context-dependent ones: for each
        trie node where the abstract walk reached the end, the rest of its subtree is
        walked from the continuation state (the caller's state after the return)."""
        if s in self._ctx:
            return self._ctx[s]
        configs = self._configs[s]
        res = None
        stacks = self._stacks
        if configs:
            a = configs[0][1]
            for _, st in configs:
                if a == 0:
                    break
                if st != a:
                    a = self._lca(a, st)
            while a and stacks[a][2]:  # keep counter frames in the abstract state
                a = stacks[a][1]
            if a and stacks[a][0] != CUT_RET:
                memo = {a: self._cut}

                def rebase(st):
                    r = memo.get(st)
                    if r is None:
                        ret, parent, k = stacks[st]
                        r = memo[st] = self._push(ret, rebase(parent), k)
                    return r

                ab = self._intern([(n, rebase(st)) for n, st in configs], False)
                cont = self._cont.get(a)
                if cont is None:
                    ret, parent, _k = stacks[a]
                    cont = self._cont[a] = self._intern(*self._closure_of([(ret, parent)]))
                res = (ab, cont)
        self._ctx[s] = res
        return res

    def _compute_mask_ctx(self, s):
        """s's packed mask: the context-independent part (its abstract state's, shared)
        plus the context-dependent tokens re-walked from the continuation state."""
        fns = _walk.get_walk_range()
        ctx = self._context(s) if fns is not None else None
        if ctx is None:
            return self._compute_mask(s)
        ab, cont = ctx
        hit = self._abs.get(ab)
        if hit is None:
            words, roots, trie = self._compute_mask(ab, record=True)
            nz = np.flatnonzero(words)
            stored = (nz.astype(np.int32), words[nz].copy()) if len(nz) <= SPARSE_WORDS else words.copy()
            size = (stored[0].nbytes * 2 if isinstance(stored, tuple) else stored.nbytes) + roots.nbytes
            hit = self._abs[ab] = (stored, roots, trie, size)
            self.mask_bytes += size
        stored, roots, trie, _ = hit
        if isinstance(stored, tuple):
            words = np.zeros(self.info.num_words, dtype=np.uint32)
            words[stored[0]] = stored[1]
        else:
            words = stored.copy()
        if len(roots) and cont:
            walk_roots = fns[1]
            node_state = np.empty(trie.num_nodes, dtype=np.int32)
            parent, byte, end = trie.dfs_parent, trie.dfs_byte, trie.dfs_end
            j, i = 0, -1
            while True:
                j, i = walk_roots(j, i, roots, cont, node_state, parent, byte, end, self.trans, self.expanded,
                                  trie.tok_start, trie.tok_ids, words)
                if j >= len(roots):
                    break
                self.expand(int(node_state[parent[i]]))
        packed = words.view("<i4")
        if self.accepting[s]:
            packed |= self.info.eos_mask
        return packed

    def _compute_mask(self, s, record=False):
        info = self.info
        trie, words = info.trie, np.zeros(info.num_words, dtype=np.uint32)
        if s != 0:
            self.expand(s)
            if self.trans[s, 0x61] and self.trans[s, 0x20]:  # cheap pre-check: "a" and " " live
                for sl in info.slices():
                    depth = self.slice_depth(s, sl)
                    level = next((lv for lv in sl.levels if depth >= lv[0]), None)
                    if level is not None:
                        words |= level[1].view(np.uint32)
                        trie = level[2]
                        break
        if record:
            return words, self._walk_recording(s, trie, words), trie
        if _walk.get_walk() is not None:
            self._walk_compiled(s, trie, words)
        else:
            self._walk_numpy(s, trie, words)
        packed = words.view("<i4")
        if self.accepting[s]:
            packed |= info.eos_mask
        return packed

    def _slice_step(self, s: int, sl):
        """(dies, successors): whether some character of the slice leads from s to the
        dead state, else the states after one slice character. Cached per state."""
        cache = self._slice_steps.setdefault(sl.name, {})
        hit = cache.get(s)
        if hit is not None:
            return hit
        succ = set()
        res = None
        expanded, expand = self.expanded, self.expand
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
                                expanded = self.expanded
                            full = rows[u] = self.trans[u].tolist()
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
        stacks = self._stacks
        frames, x = [], st
        while x and stacks[x][2]:
            frames.append(stacks[x])
            x = stacks[x][1]
        if not x:
            res = None
        elif stacks[x][0] == CUT_RET:
            res = st
        else:
            res = self._cut
            for ret, _parent, k in reversed(frames):
                res = self._push(ret, res, k)
        self._abs_stack[st] = res
        return res

    def _config_bound(self, x, sl, memo, level):
        """max over the configurations c of x of the slice depth of c alone, inside the
        rule it is in (its stack cut at the innermost call: a slice string that would
        return from that rule counts as dying). A lower bound of x's depth (x is live
        if any of its configurations is), shared by every call site of the rule: the
        same key-rest / string rule called from a hundred places is measured once."""
        best = 0
        singles = self._abs_single
        top = sl.max_level
        for c in self._configs[x]:
            ab = singles.get(c)
            if ab is None:
                st = self._abstract_stack(c[1])
                ab = singles[c] = 0 if st is None or st == c[1] else self._intern([(c[0], st)], False)
            if not ab:
                continue
            d = memo.get(ab)
            if d is None:
                if level > 1 or self._budget <= 0:  # inside another single's search, or out of budget
                    continue
                d = self.slice_depth(ab, sl, nested=level)
            if d > best:
                best = d
                if best >= top:
                    break
        return best

    def slice_depth(self, s: int, sl, nested: int = 0) -> int:
        """A lower bound of d, the largest n such that every string of at most n slice
        characters leads from s to a live state (UNBOUNDED when the search closes: every
        state reachable through slice characters was seen and none dies). A breadth-first
        search over slice characters, cut at sl.max_level levels, at states already
        measured (memoised), and after SLICE_BUDGET new per-state steps (then the levels
        completed so far are the bound: smaller is always safe, it only means walking
        more of the trie). States are taken by their canonical form (a counter deep in
        its range is one state), sound because the search spans less than a token."""
        memo = self._slice_depth.setdefault(sl.name, {})
        hit = memo.get(s)
        if hit is not None:
            return hit
        steps = self._slice_steps.setdefault(sl.name, {})
        canon = self._canonical if self.nfa.counter else None
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
                dies, succ = self._slice_step(x, sl)
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

    def _walk_compiled(self, s, trie, words):
        """Sets in words the bits of trie's tokens that s allows (numba DFS walk)."""
        n = trie.num_nodes
        node_state = np.empty(n, dtype=np.int32)  # only live parents are ever read
        node_state[0] = s
        i = 1 if s != 0 else n
        parent, byte, end = trie.dfs_parent, trie.dfs_byte, trie.dfs_end
        walk = _walk.get_walk()
        while i < n:
            i = walk(i, node_state, parent, byte, end, self.trans, self.expanded, trie.tok_start, trie.tok_ids, words)
            if i < n:
                self.expand(int(node_state[parent[i]]))

    def _walk_recording(self, s, trie, words):
        """_walk_compiled for an abstract state; returns the trie nodes (DFS order) where
        its rule returned to the context (accepting states)."""
        n = trie.num_nodes
        node_state = np.empty(n, dtype=np.int32)
        node_state[0] = s
        i = 1 if s != 0 else n
        parent, byte, end = trie.dfs_parent, trie.dfs_byte, trie.dfs_end
        walk_range = _walk.get_walk_range()[0]
        rec = np.zeros(257, dtype=np.int32)
        while i < n:
            i = walk_range(i, n, node_state, parent, byte, end, self.trans, self.expanded, trie.tok_start,
                           trie.tok_ids, words, self.acc, rec)
            if i < n:
                if not self.expanded[node_state[parent[i]]]:
                    self.expand(int(node_state[parent[i]]))
                else:  # rec full
                    grown = np.zeros(2 * len(rec) - 1, dtype=np.int32)
                    grown[: len(rec)] = rec
                    rec = grown
        return rec[1 : 1 + rec[0]].copy()

    def _walk_numpy(self, s, trie, words):
        """Same as _walk_compiled, level by level with numpy gathers (BFS order)."""
        node_state = np.zeros(trie.num_nodes + 1, dtype=np.int32)
        if s != 0 and trie.num_nodes > 1:
            byte, first_child, num_children = trie.byte, trie.first_child, trie.num_children
            cur = np.arange(trie.level_start[1], trie.level_start[2], dtype=np.int32)
            pst = np.full(len(cur), s, dtype=np.int32)
            while True:
                exp = self.expanded
                if not exp[pst].all():
                    for u in np.unique(pst[~exp[pst]]):
                        self.expand(int(u))
                st = self.trans.reshape(-1)[pst.astype(np.int64) * 256 + byte[cur]]
                node_state[cur] = st
                keep = st != 0
                par, pst = cur[keep], st[keep]
                counts = num_children[par]
                has = counts > 0
                if not has.all():
                    par, pst, counts = par[has], pst[has], counts[has]
                if len(par) == 0:
                    break
                ends = np.cumsum(counts)
                total = int(ends[-1])
                cur = (np.repeat(first_child[par] - (ends - counts), counts) + np.arange(total, dtype=np.int32)).astype(np.int32)
                pst = np.repeat(pst, counts)
        allowed = np.zeros(len(words) * 32, dtype=bool)
        allowed[: len(trie.token_node)] = node_state[trie.token_node] != 0
        words |= np.packbits(allowed, bitorder="little").view(np.uint32)

    # ---- jump-forward --------------------------------------------------------------
    def forced_bytes(self, s: int) -> bytes:
        """The longest byte string forced from s (one possible next byte at each step,
        and the language may not end there)."""
        hit = self._jump.get(s)
        if hit is not None:
            return hit
        out = bytearray()
        cur = s
        while cur and not self.accepting[cur] and len(out) < MAX_JUMP:
            self.expand(cur)
            row = self.trans[cur]
            nz = np.flatnonzero(row)
            if len(nz) != 1:
                break
            out.append(int(nz[0]))
            cur = int(row[nz[0]])
        res = bytes(out)
        self._jump[s] = res
        return res
