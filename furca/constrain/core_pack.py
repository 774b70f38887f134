"""The NFA packed for the row kernel (core_rows.Core): its per-node tables as int32
arrays laid end to end in one array, which _core_kernels.unflat takes apart into views
(one argument through numba's dispatch instead of eighteen)."""

from __future__ import annotations

import itertools

import numpy as np

_chain = itertools.chain.from_iterable
_accumulate = itertools.accumulate


def pack(nfa):
    """The NFA as one int32 array of int32 arrays (_core_kernels.unflat takes it apart;
    one array passes through numba's dispatch in ~0.1 µs, a tuple of 18 in ~1.1): edges (CSR offsets,
    lo, hi, target), eps (offsets, targets), per node: callee and return node of a call
    (-1: none), tail (the return node of a tail call), end (a rule end), counter (body,
    exit, min, max; -1: none), length (body, exit, min, max or -1; -1: none), tick, need
    (-1: none), the twin without a maximum of a length region (-1: none) and its need, a
    counter body's fewest bytes (the automaton's canonical forms). ~0.25 ms for the
    median MaskBench grammar (~700 nodes), once, when its kernel is made."""
    edges, eps = nfa.edges, nfa.eps
    n = len(edges)
    # itertools and np.fromiter, not ufuncs' reduce / accumulate nor np.cumsum: a process
    # forked after set-up (the shared harness) pays the first reduction of its life in
    # ~20 pages of the parent's (numpy's reduction machinery), np.cumsum more (its Python wrapper)
    e_offs = np.fromiter(_accumulate(map(len, edges), initial=0), np.int32, n + 1)
    p_offs = np.fromiter(_accumulate(map(len, eps), initial=0), np.int32, n + 1)
    n_e, n_p = int(e_offs[n]), int(p_offs[n])
    sizes = [n + 1, n_e, n_e, n_e, n + 1, n_p] + [n] * 4 + [4 * n, 4 * n] + [n] * 5
    head = 2 + len(sizes)  # n, then where each array starts and where the last ends
    bounds = list(_accumulate(sizes, initial=head))
    out = np.empty(bounds[-1], np.int32)  # the arrays written in place (views of out)
    out[0] = n
    out[1:head] = bounds
    (e_off, e_lo, e_hi, e_t, p_off, p_t, callee, cret, tail, end, k4, l4, tick, need, lfree, lneed,
     kbytes) = (out[x:y] for x, y in zip(bounds[:-1], bounds[1:]))
    k4, l4 = k4.reshape(n, 4), l4.reshape(n, 4)
    e_off[:] = e_offs
    flat = np.fromiter(_chain(_chain(edges)), np.int32, 3 * n_e).reshape(-1, 3)
    e_lo[:], e_hi[:], e_t[:] = flat[:, 0], flat[:, 1], flat[:, 2]
    p_off[:] = p_offs
    p_t[:] = np.fromiter(_chain(eps), np.int32, n_p)
    callee.fill(-1)
    cret.fill(-1)
    if nfa.call:
        c = np.fromiter(nfa.call.keys(), np.int32, len(nfa.call))
        fr = np.fromiter(_chain(nfa.call.values()), np.int32, 2 * len(nfa.call)).reshape(-1, 2)
        callee[c], cret[c] = fr[:, 0], fr[:, 1]
    for x, nodes in ((tail, nfa.is_tail), (end, nfa.is_end), (tick, nfa.tick)):
        x.fill(0)
        x[np.fromiter(nodes, np.int32, len(nodes))] = 1
    k4.fill(-1)
    for c, v in nfa.counter.items():
        k4[c] = v
    l4.fill(-1)
    for c, (b, x, lo, hi) in nfa.length.items():
        l4[c] = (b, x, lo, -1 if hi is None else hi)
    need.fill(-1)
    if nfa.need:
        need[np.fromiter(nfa.need.keys(), np.int32, len(nfa.need))] = np.fromiter(
            nfa.need.values(), np.int32, len(nfa.need))
    lfree.fill(-1)
    lneed.fill(0)
    for c, f in nfa.length_free.items():
        lfree[c] = f
        lneed[c] = nfa.length_need[c]
    kbytes.fill(1)
    for c, b in nfa.counter_bytes.items():
        kbytes[c] = b
    return out
