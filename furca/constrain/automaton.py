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

import threading

import numpy as np

from . import _walk
from .nfa import NFA
from .tokenizer import TokenizerInfo

MAX_CONFIGS = 4096  # configurations in one state (ambiguity bound)
MAX_STACK_DEPTH = 512  # nesting bound
MAX_STATES = 1 << 20  # states per compiled grammar (~1 GB of transition rows)
MAX_JUMP = 4096
SPARSE_WORDS = 256  # masks with at most this many non-zero words are stored sparse
MAX_MASK_BYTES = 256 << 20  # per compiled grammar
UNBOUNDED = 1 << 30  # slice depth of a state no slice string can kill
SLICE_BUDGET = 12  # new per-state slice steps one mask may spend proving its slice depth


class AutomatonLimit(Exception):
    """A state would exceed MAX_CONFIGS, MAX_STACK_DEPTH or MAX_STATES."""


class LazyAutomaton:
    def __init__(self, nfa: NFA, info: TokenizerInfo):
        self.nfa, self.info = nfa, info
        self.lock = threading.RLock()
        self._stacks = [(-1, -1, 0)]  # id -> (return node, parent id, repetition count)
        self._stack_ids = {}
        self._stack_depth = [0]
        self._closure_cache = {}
        self._state_ids = {}
        self._configs = []  # state id -> tuple of (node, stack)
        self.accepting = []  # state id -> bool
        self._cap = 64
        self.trans = np.zeros((self._cap, 256), dtype=np.int32)
        self.expanded = np.zeros(self._cap, dtype=bool)
        self.masks: dict[int, object] = {}
        self._canon: dict[int, int] = {}
        self._canon_stack: dict[int, int] = {}
        self._max_token_len = info.max_token_len
        self.mask_bytes = 0
        self._jump: dict[int, bytes] = {}
        self._slice_steps: dict[str, dict] = {}
        self._slice_depth: dict[str, dict] = {}
        self._intern((), False)  # dead state 0
        self.expanded[0] = True
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
        edges, eps, call, is_end, is_tail, counter = nfa.edges, nfa.eps, nfa.call, nfa.is_end, nfa.is_tail, nfa.counter
        if not eps[node] and node not in is_end and node not in call and node not in counter:
            res = ((key,) if edges[node] else (), False)  # a plain node (e.g. inside a UTF-8 sequence)
            self._closure_cache[key] = res
            return res
        out, accept = [], False
        seen = {key}
        todo = [key]
        while todo:
            n, st = todo.pop()
            if edges[n]:
                out.append((n, st))
            nxt = [(t, st) for t in eps[n]]
            c = call.get(n)
            if c is not None:
                callee, ret = c
                nxt.append((callee, st if ret in is_tail else self._push(ret, st)))
            if n in counter:
                body, done, lo, hi = counter[n]
                nxt.append((body, self._push(n, st, 1)))
                if lo == 0:
                    nxt.append((done, st))
            if n in is_end:
                if st == 0:
                    accept = True
                else:
                    ret, parent, k = self._stacks[st]
                    if k:  # a counter frame: k bodies done
                        body, done, lo, hi = counter[ret]
                        if k < hi:
                            nxt.append((body, self._push(ret, parent, k + 1)))
                        if k >= lo:
                            nxt.append((done, parent))
                    else:
                        nxt.append((ret, parent))
            for x in nxt:
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
        res = (tuple(out), accept)
        self._closure_cache[key] = res
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
                self._cap *= 2
                trans = np.zeros((self._cap, 256), dtype=np.int32)
                trans[: len(self.trans)] = self.trans
                expanded = np.zeros(self._cap, dtype=bool)
                expanded[: len(self.expanded)] = self.expanded
                self.trans, self.expanded = trans, expanded
        return sid

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
                    packed = self._compute_mask(s)
                    nz = np.flatnonzero(packed)
                    m = (nz.astype(np.int32), packed[nz].copy()) if len(nz) <= SPARSE_WORDS else packed
                    size = m[0].nbytes * 2 if isinstance(m, tuple) else m.nbytes
                    if self.mask_bytes + size > MAX_MASK_BYTES:
                        for k in list(self.masks)[: len(self.masks) // 2 + 1]:
                            old = self.masks.pop(k)
                            self.mask_bytes -= old[0].nbytes * 2 if isinstance(old, tuple) else old.nbytes
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

    def _compute_mask(self, s):
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
        for seq in sl.utf8_seqs:
            cur = np.array([s], dtype=np.int32)
            for lo, hi in seq:
                for u in cur.tolist():
                    if not self.expanded[u]:
                        self.expand(u)
                cur = np.unique(self.trans[cur, lo : hi + 1])
                if cur[0] == 0:
                    res = (True, ())
                    break
            if res is not None:
                break
            succ.update(cur.tolist())
        if res is None:
            res = (False, tuple(succ))
        cache[s] = res
        return res

    def slice_depth(self, s: int, sl) -> int:
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
        best = UNBOUNDED
        budget = SLICE_BUDGET
        level, seen = [s], {s}
        for i in range(top):
            nxt = []
            for x in level:
                m = memo.get(x) if x != s else None
                if m is not None:
                    best = min(best, i + m)
                    continue
                if x not in steps:
                    if budget == 0:
                        best = min(best, i)
                        break
                    budget -= 1
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
        best = min(best, UNBOUNDED)
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
