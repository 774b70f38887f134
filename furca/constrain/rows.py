"""Transition rows of the automaton's states: one successor state per byte class.

``Rows(nfa)`` computes ``trans[s]`` for a state s of the automaton it is handed
(automaton.LazyAutomaton.expand calls it under the automaton's lock; it reads the
automaton's tables and grows them through ``intern``, ``closure``, ``closure_of``,
``template`` and ``byte_stack``). It holds no reference to the automaton (which owns it),
so a dropped grammar is freed by reference counts, without a cycle:

- one configuration (n, stack): n's byte classes (``template``, cached per NFA node),
  one closure and intern per distinct target set;
- several configurations: the bytes cut into runs that meet the same edges of every
  configuration, one successor per distinct run of targets. The cut of a state depends
  only on its configurations' NFA nodes, not their stacks, so it is computed once per
  node tuple (a *layout*: the runs, and per distinct bucket its (configuration index,
  target node) pairs) and shared by every state on the same nodes: the same object or
  key trie at another depth or from another caller, the states of a string body under
  other counts. A successor is looked up by its targets first (``_succ``): states that
  converge on the same configurations skip the closure and intern.

Both caches grow with the grammar; the layouts are bounded by MAX_LAYOUTS (then they
start over). See DESIGN.md ("Supporting the cold path").
"""

from __future__ import annotations

import numpy as np

MAX_LAYOUTS = 4096  # cached layouts per grammar (~1-3 KB each: Snowplow sp_138 holds 1,182, ~3.6 MB beside its 33 MB of rows and masks)


class Rows:
    """single(a, s, n, st) / multi(a, s, configs): write state s's row into a.trans[s]
    (a: the automaton.LazyAutomaton over the NFA)."""

    def __init__(self, nfa):
        self._edges = nfa.edges
        self._succ: dict[tuple, int] = {}  # targets ((node, stack), ...) -> state of their closure
        self._layouts: dict[tuple, tuple] = {}  # NFA nodes of a state -> (run buckets, run lengths, buckets)
        self._ticks = bool(nfa.tick)  # a length region: bytes may change the stack (byte_stack)

    def single(self, a, s, n, st):
        """The row of a state of one configuration (n, st), from n's byte classes."""
        closure, intern = a.closure, a.intern
        st = a.byte_stack(n, st)
        memo = {}
        spans = []
        for lo, hi, targets in (a.template(n) if st >= 0 else ()):
            sid = memo.get(targets)
            if sid is None:
                if len(targets) == 1:
                    sid = intern(*closure(targets[0], st))
                else:
                    sid = intern(*a.closure_of([(t, st) for t in targets]))
                memo[targets] = sid
            spans.append((lo, hi, sid))
        row = a.trans[s]  # after the interning: it may have grown (reallocated) the table
        row[:] = 0
        for lo, hi, sid in spans:
            row[lo:hi] = sid

    def multi(self, a, s, configs):
        """The row of a state of several configurations, through the layout of its nodes."""
        nodes = tuple([n for n, _st in configs])
        lay = self._layouts.get(nodes)
        if lay is None:
            lay = self._layout(nodes)
        run_bucket, run_len, buckets = lay
        if self._ticks:
            byte_stack = a.byte_stack
            sts = [byte_stack(n, st) for n, st in configs]
        else:
            sts = [st for _n, st in configs]
        succ, closure, intern = self._succ, a.closure, a.intern
        sids = [0]  # bucket 0: bytes no configuration takes
        for bucket in buckets:
            key = tuple([(t, sts[i]) for i, t in bucket if sts[i] >= 0])
            sid = succ.get(key)
            if sid is None:
                if not key:
                    sid = 0
                elif len(key) == 1:
                    sid = intern(*closure(*key[0]))
                else:
                    sid = intern(*a.closure_of(key))
                succ[key] = sid
            sids.append(sid)
        a.trans[s] = np.repeat(np.array(sids, dtype=np.int32)[run_bucket], run_len)

    def _layout(self, nodes):
        """The runs of bytes that meet the same edges of every node: (bucket of each run,
        length of each run, buckets), a bucket being ((index in nodes, target node), ...);
        identical buckets (a class split by another node's edge) are one."""
        edges = self._edges
        cuts = {0, 256}
        for n in nodes:
            for lo, hi, _t in edges[n]:
                cuts.add(lo)
                cuts.add(hi + 1)
        cuts = sorted(cuts)
        pos = {c: j for j, c in enumerate(cuts)}
        runs = [[] for _ in range(len(cuts) - 1)]
        for i, n in enumerate(nodes):
            for lo, hi, t in edges[n]:
                for j in range(pos[lo], pos[hi + 1]):
                    runs[j].append((i, t))
        ids: dict[tuple, int] = {(): 0}
        buckets = []
        run_bucket = []
        for run in runs:
            key = tuple(run)
            k = ids.get(key)
            if k is None:
                buckets.append(key)
                k = ids[key] = len(buckets)
            run_bucket.append(k)
        lens = np.diff(np.array(cuts, dtype=np.intp))
        lay = (np.array(run_bucket, dtype=np.intp), lens, tuple(buckets))
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        self._layouts[nodes] = lay
        return lay
