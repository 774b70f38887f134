"""Rows of single-configuration states on plain NFA nodes, built inside the compiled walks.

Most states a mask's trie walk meets for the first time are one configuration (n, stack)
whose node's byte classes each lead to one *plain* node: no epsilon edge, call, rule end,
counter, length region or liveness need, so its closure is just (t, stack) (the state
inside a string body, a number, a key). Expanding one in Python (rows.Rows.single:
closure, intern, row) costs ~20 µs plus the walk's return to Python; the row itself is a
handful of table lookups. ``PlainRows`` holds what the numba walks (_walk.py) need to do
it themselves:

- per NFA node, its byte spans ``(lo, hi + 1, target)`` when every class of the node has
  one plain target (``node_span[n] = (first + 1, stop)``; 0: not learned yet, -1: not
  plain; zeros, so the pages of nodes never learned stay unmapped). Learned in Python the first time a state on the node is expanded there (and its
  targets with it), so a grammar pays only for the nodes its walks reach;
- per state, its single configuration (``cfg_node`` = node + 1, 0 for any other state;
  ``cfg_stack``);
- the single-configuration, non-accepting states by (node, stack): an open-addressing
  table in numpy (``keys`` = node << 32 | stack, -1 empty; ``vals``), filled by
  ``LazyAutomaton.intern`` for the states it makes and by the kernels for theirs;
- ``ctr``: the next state id, how many new states the kernels may still make (room in
  the transition table and in the hash table), the table's entries, the number of rows
  the kernels wrote (``log``).

A kernel that expands a state writes its row and sets ``rowdone`` (its own "expanded"
flag), interns the successors it does not find (state ids from ``ctr[0]``, their
configuration in ``cfg_*``), and logs the state. ``sync`` (called by the walk driver,
under the automaton's lock, before anything else reads the automaton) appends the new
states to the automaton's Python tables and only then marks the logged rows
``expanded``: a reader without the lock (``LazyAutomaton.step``) never meets a state id
the Python tables do not hold yet. A state the kernel cannot expand (several
configurations, a node that is not plain or not learned, no room) returns the walk to
Python as before. See DESIGN.md ("Supporting the cold path").
"""

from __future__ import annotations

import numpy as np

ENABLED = False  # off by default: measured slower on the slowest MaskBench schemas (DESIGN.md, Known limits)
NOT_LEARNED, NOT_PLAIN = 0, -1
LEARN_NODES = 32  # nodes one learn() may learn
LOG_LEN = 512  # rows one kernel call may write before it returns to be synced
HEADROOM = 256  # table slots kept free: a kernel call may make at least HEADROOM / 2 states
MIN_TABLE = 1 << 9


class PlainRows:
    """The compiled walks' view of single-configuration states (see the module docstring).
    Owned by the automaton; every method runs under its lock."""

    def __init__(self, nfa, cap: int, insert, expand_plain):
        self.nfa = nfa
        self._insert = insert  # _walk's compiled table insert (the kernels' own hash)
        self._expand_plain = expand_plain  # _walk's expansion of one state, called from Python too
        self.node_span = np.zeros((len(nfa.edges), 2), dtype=np.int32)  # NOT_LEARNED
        self.span_lo = np.zeros(64, dtype=np.int32)
        self.span_hi = np.zeros(64, dtype=np.int32)
        self.span_tgt = np.zeros(64, dtype=np.int32)
        self._spans = 0
        self.rowdone = np.zeros(cap, dtype=bool)
        self.cfg_node = np.zeros(cap, dtype=np.int32)  # node + 1; 0: not one configuration
        self.cfg_stack = np.zeros(cap, dtype=np.int32)
        self.keys = np.full(MIN_TABLE, -1, dtype=np.int64)
        self.vals = np.zeros(MIN_TABLE, dtype=np.int32)
        self.log = np.zeros(LOG_LEN, dtype=np.int32)
        self.ctr = np.zeros(5, dtype=np.int64)  # next id, room, table entries, rows logged, (spare)
        self._pend_keys = np.zeros(256, dtype=np.int64)  # states interned in Python, not in the table yet
        self._pend_ids = np.zeros(256, dtype=np.int32)
        self._pending = 0
        self._entries = 0  # table entries, pending ones included
        self._fx = None  # the kernels' tuple, rebuilt when an array is replaced
        self._learned = 0  # plain nodes learned

    def nbytes(self, num_states: int) -> int:
        """Bytes in use beyond the automaton's own tables: the hash table, the spans, the
        learned nodes' entries and the per-state arrays up to num_states (the rest of
        those arrays is reserved like the transition table, see automaton._grow)."""
        return int(self.keys.nbytes + self.vals.nbytes + 3 * self.span_lo.nbytes + self.log.nbytes
                   + 8 * self._learned + 9 * num_states)

    def grow(self, cap: int) -> None:
        """The per-state arrays at the automaton's new capacity (zeros: lazily mapped)."""
        for name in ("rowdone", "cfg_node", "cfg_stack"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        self._fx = None

    def add(self, sid: int, configs: tuple, accept: bool) -> None:
        """A state interned in Python: recorded when it is one configuration."""
        if len(configs) != 1:
            return
        n, st = configs[0]
        self.cfg_node[sid] = n + 1
        self.cfg_stack[sid] = st
        if not accept:  # into the table at the next kernel call (_flush): one call for many
            k = self._pending
            if k == len(self._pend_keys):
                self._pend_keys = np.concatenate([self._pend_keys, self._pend_keys])
                self._pend_ids = np.concatenate([self._pend_ids, self._pend_ids])
            self._pend_keys[k] = (n << 32) | st
            self._pend_ids[k] = sid
            self._pending = k + 1

    def _flush(self) -> None:
        """The pending states into the table (grown to keep it at most half full)."""
        new = self._pending
        self._entries = int(self.ctr[2]) + new
        if 2 * self._entries + HEADROOM > len(self.keys):
            size = len(self.keys)
            while 2 * self._entries + HEADROOM > size:
                size *= 2
            keys, vals = self.keys, self.vals
            self.keys = np.full(size, -1, dtype=np.int64)
            self.vals = np.zeros(size, dtype=np.int32)
            self._insert(self.keys, self.vals, keys, vals)
            self._fx = None
        if new:
            self._insert(self.keys, self.vals, self._pend_keys[:new], self._pend_ids[:new])
            self._pending = 0
        self.ctr[2] = self._entries

    def learn(self, closures, n: int) -> None:
        """node_span[n] from its byte classes (closures.Closures), and the plain nodes it
        leads to, breadth first, up to LEARN_NODES nodes: the states a walk meets next."""
        todo, learned = [n], 0
        while todo and learned < LEARN_NODES:
            x = todo.pop(0)
            if self.node_span[x, 0] != NOT_LEARNED:
                continue
            self._learn_one(closures, x)
            learned += 1
            first, stop = self.node_span[x]
            if first > 0:
                todo.extend(int(t) for t in self.span_tgt[first - 1 : stop] if t >= 0)

    def _learn_one(self, closures, n: int) -> None:
        nfa = self.nfa
        spans = []
        if n not in nfa.tick:
            for lo, stop, targets in closures.template(n):
                t = _plain_target(nfa, closures, targets)
                if t is None:
                    spans = None
                    break
                spans.append((lo, stop, t))
        else:
            spans = None
        if not spans:
            self.node_span[n] = NOT_PLAIN
            return
        first = self._spans
        stop = first + len(spans)
        if stop > len(self.span_lo):
            size = 2 * stop
            for name in ("span_lo", "span_hi", "span_tgt"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=np.int32)
                new[:first] = old[:first]
                setattr(self, name, new)
            self._fx = None
        self.span_lo[first:stop], self.span_hi[first:stop], self.span_tgt[first:stop] = zip(*spans)
        self._spans = stop
        self._learned += 1
        self.node_span[n] = (first + 1, stop)

    def fx(self, num_states: int, cap: int) -> tuple:
        """The kernels' arguments, with room for new states set (table at most half full)."""
        if self._pending or self._fx is None:
            self._flush()
        ctr = self.ctr
        ctr[0] = num_states
        ctr[1] = min(cap - num_states, len(self.keys) // 2 - int(ctr[2]))
        ctr[3] = 0
        if self._fx is None:
            self._fx = (self.rowdone, self.cfg_node, self.cfg_stack, self.node_span, self.span_lo, self.span_hi,
                        self.span_tgt, self.keys, self.vals, ctr, self.log)
        return self._fx

    def expand(self, a, s: int) -> bool:
        """State s's row by the compiled expansion, for a caller in Python (the slice
        search, accept_token's jump-forward, a walk's resume); False when s is not one
        configuration on a learned plain node (or without room)."""
        n = int(self.cfg_node[s]) - 1
        if n < 0 or self.node_span[n, 0] <= 0:
            return False
        done = self._expand_plain(s, a.trans, self.fx(a.num_states, a.trans.shape[0]))
        self.sync(a)
        return done

    def sync(self, a) -> None:
        """The kernels' new states into the automaton's Python tables, then their rows
        marked expanded (see the module docstring)."""
        n = int(self.ctr[0])
        configs = a.configs
        if n == len(configs) and not self.ctr[3]:
            return
        accepting, ids = a.accepting, a._state_ids
        for sid in range(len(configs), n):
            c = ((int(self.cfg_node[sid]) - 1, int(self.cfg_stack[sid])),)
            configs.append(c)
            accepting.append(False)
            ids[(c, False)] = sid
        logged = int(self.ctr[3])
        if logged:
            a.expanded[self.log[:logged]] = True
            self.ctr[3] = 0


def _plain_target(nfa, closures, targets):
    """The node u such that the closure of these targets on any stack is (u, stack), -1
    when it is empty on any stack, None otherwise: one target, whose stack-independent
    closure (closures.Closures.relative) is one node with no frame pushed and no return
    (a plain node itself, or an epsilon chain to one), outside liveness needs."""
    if len(targets) != 1:
        return None
    rel_out, returns = closures.relative(targets[0])
    if returns or len(rel_out) > 1:
        return None
    if not rel_out:
        return -1
    u, frames = rel_out[0]
    return None if frames or u in nfa.need else u
