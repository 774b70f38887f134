"""Transition rows of the automaton's states: one successor state per byte class.

``Rows(nfa)`` computes ``trans[s]`` for a state s of the automaton it is handed
(automaton.LazyAutomaton.expand calls it under the automaton's lock; it reads the
automaton's tables and grows them through ``intern``, ``closure``, ``closure_of``,
``template``, ``byte_stack``, ``closures.relative`` and ``stacks.push``). It holds no
reference to the automaton (which owns it), so a dropped grammar is freed by reference
counts, without a cycle:

- one configuration (n, stack): n's byte classes (``template``, cached per NFA node),
  one closure and intern per distinct target set;
- several configurations: the bytes cut into runs that meet the same edges of every
  configuration, one successor per distinct run of targets. The cut of a state depends
  only on its configurations' NFA nodes, not their stacks, so it is computed once per
  node tuple (a *layout*) and shared by every state on the same nodes: the same object
  or key trie at another depth or from another caller, the states of a string body
  under other counts. A successor is looked up by its targets first (``_succ``): states
  that converge on the same configurations skip the closure and intern.

A layout also holds each bucket's *plan*, built on the bucket's first new successor:
per target its stack-independent closure (``Closures.relative``), so a new successor is
its targets' relative configurations pushed on the configurations' own stacks, without
a closure call, lookup and cache entry per (target, stack) pair; a target whose rule
can end without consuming takes the full closure (it returns through the stack). In a
length region the stacks are those after the byte (``byte_stack``: a tick node counts a
character; -1, past the maximum, takes no byte) and the successor keeps only the
configurations ``Closures.live`` keeps, as ``closure`` does: ``closure(t, st)`` of a
target that cannot return is ``live(relative(t) pushed on st)``, and live filters
configuration by configuration, so the union of the closures is the filtered union.

The caches grow with the grammar; the layouts are bounded by MAX_LAYOUTS (then they
start over). See DESIGN.md ("Supporting the cold path").
"""

from __future__ import annotations

import numpy as np

MAX_LAYOUTS = 4096  # cached layouts per grammar (~1-3 KB each: Snowplow sp_138 holds 1,182)
MAX_SPANS = 16  # a layout of more runs with targets fills rows through a byte -> bucket array


class Rows:
    """single(a, s, n, st) / multi(a, s, configs): write state s's row into a.trans[s]
    (a: the automaton.LazyAutomaton over the NFA)."""

    def __init__(self, nfa):
        self._succ: dict[tuple, int] = {}  # targets ((node, stack), ...) -> state of their closure
        self._layouts: dict[tuple, tuple] = {}  # NFA nodes of a state -> (byte -> bucket, buckets, plans)
        self._ticks = bool(nfa.tick)  # a length region: bytes may change the stack (byte_stack)
        self._need = bool(nfa.need)  # a length region: successors keep the live configurations only

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
            lay = self._layout(a, nodes)
        fill, buckets, plans = lay
        succ = self._succ
        sids = [0]  # bucket 0: bytes no configuration takes
        if self._ticks:  # a length region: the stacks after the byte (-1: past its maximum)
            byte_stack = a.byte_stack
            sts = [byte_stack(n, st) for n, st in configs]
        else:
            sts = [st for _n, st in configs]
        live = a.closures.live if self._need else None
        for j, bucket in enumerate(buckets):
            key = tuple([(t, sts[i]) for i, t in bucket])
            sid = succ.get(key)
            if sid is None:
                plan = plans[j]
                if plan is None:
                    plan = plans[j] = bucket_plan(a, bucket)
                sid = succ[key] = from_plan(a, plan, sts, live)
            sids.append(sid)
        if type(fill) is tuple:  # a few runs: written as slices (after the interning, which may grow the table)
            row = a.trans[s]
            row[:] = 0
            for lo, hi, k in fill:
                row[lo:hi] = sids[k]
        else:
            a.trans[s] = np.array(sids, dtype=np.int32)[fill]

    def _layout(self, a, nodes):
        """(byte -> bucket, buckets, plans) of a state on these NFA nodes: the runs of
        bytes that meet the same edges of every node, a bucket being ((index in nodes,
        target node), ...) (identical buckets, a class split by another node's edge, are
        one; bucket 0, no target, is implicit). plans[j]: bucket j's ((index, target,
        relative closure or None), ...), built on its first new successor."""
        edges = a.nfa.edges
        cuts = {0, 256}
        for n in nodes:
            for lo, hi, _t in edges[n]:
                cuts.add(lo)
                cuts.add(hi + 1)
        cuts = sorted(cuts)
        nrun = len(cuts) - 1
        if nrun == 1:  # every edge covers every byte
            runs = [[(i, t) for i, n in enumerate(nodes) for _lo, _hi, t in edges[n]]]
        else:
            pos = {c: j for j, c in enumerate(cuts)}
            runs = [[] for _ in range(nrun)]
            for i, n in enumerate(nodes):
                for lo, hi, t in edges[n]:
                    j, stop = pos[lo], pos[hi + 1]
                    if stop - j == 1:
                        runs[j].append((i, t))
                    else:
                        p = (i, t)
                        for run in runs[j:stop]:
                            run.append(p)
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
        plans = [None] * len(buckets)  # built on a bucket's first new successor
        fill = tuple([(lo, hi, k) for lo, hi, k in zip(cuts, cuts[1:], run_bucket) if k])
        if len(fill) > MAX_SPANS:
            fill = np.array(run_bucket, dtype=np.intp).repeat([hi - lo for lo, hi in zip(cuts, cuts[1:])])
        lay = (fill, tuple(buckets), plans)
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        self._layouts[nodes] = lay
        return lay


def bucket_plan(a, bucket):
    """((index, target, relative closure or None), ...) of a bucket's (index, target)
    pairs: None for a target whose rule may end without consuming (it needs the stack)."""
    relative = a.closures.relative
    plan = []
    for i, t in bucket:
        rel_out, returns = relative(t)
        plan.append((i, t, None if returns else rel_out))
    return tuple(plan)


def from_plan(a, plan, sts, live):
    """The state after a bucket: each target's relative closure pushed on its
    configuration's stack (the full closure for a target whose rule may end); in a
    length region (live: Closures.live) without the configurations past the maximum
    (a stack of -1 takes no byte; live drops those that cannot fit)."""
    out, accept = set(), False
    push = a.stacks.push
    for i, t, rel_out in plan:
        st = sts[i]
        if st < 0:
            continue
        if rel_out is None:
            c, acc = a.closure(t, st)
            out.update(c)
            accept |= acc
            continue
        for n, rel in rel_out:
            if rel:
                x = st
                for ret, k in rel:
                    x = push(ret, x, k)
                out.add((n, x))
            else:
                out.add((n, st))
    if live is not None:
        out = live(out)
    return a.intern(out, accept)
