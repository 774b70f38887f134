"""Token masks of automaton states: computed once per state, stored, copied afterwards.

TokenMasks is a mixin of automaton.LazyAutomaton (it reads and grows the same state
tables). A state's mask is a walk of the token trie over the transition table (numba
DFS in _walk.py, or numpy level by level; dead states prune whole subtrees), with the
vocabulary slices of tokenizer.TokenSlice taken whole where slices.SliceBounds proves
them allowed. A state inside a rule call shares the mask of its abstract state (the
rule's context cut off, see _context) and re-walks only the tokens that leave the
rule. Masks are stored packed, or sparse when few words are non-zero, in a store
bounded per grammar. See DESIGN.md.
"""

from __future__ import annotations

import numpy as np

from . import _walk

SPARSE_WORDS = 256  # masks with at most this many non-zero words are stored sparse
MAX_MASK_BYTES = 256 << 20  # per compiled grammar
CUT_RET = -2  # return node of the context frame of abstract states (see _context)


class TokenMasks:
    """mask(s) / write_mask(s, out): the packed int32 token bitmask of state s (EOS set
    exactly when s accepts). Computed under the automaton's lock on first use; readers
    of a cached mask take no lock."""

    def _init_masks(self):
        self.masks: dict[int, object] = {}
        self.mask_bytes = 0
        self._ctx: dict[int, tuple | None] = {}  # state -> (abstract state, continuation state) or None
        self._cont: dict[int, int] = {}  # context stack -> state after returning from it
        self._abs: dict[int, tuple] = {}  # abstract state -> (mask words, return nodes, trie)

    # ---- the mask store ---------------------------------------------------------------
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

    # ---- trie walks ------------------------------------------------------------------
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
