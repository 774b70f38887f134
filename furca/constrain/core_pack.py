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
    counter body's fewest bytes (the automaton's canonical forms). ~0.16 ms for the
    median MaskBench grammar (~500 nodes), once, when its kernel is made; the edges of the
    lasting rules laid out at node 0 (nfa._Layout, ~45% of a median grammar's nodes) come
    packed with their layout (layout_edges), so only the grammar's own nodes are read
    here."""
    n = len(nfa.edges)
    lay = nfa.layout
    pre = layout_edges(lay) if lay is not None else None
    size = lay.size if pre is not None else 0
    first_e, first_p = (int(pre[0][-1]), int(pre[2][-1])) if size else (0, 0)
    e_offs, flat, p_offs, targets = _edges_of(nfa.edges[size:], nfa.eps[size:], first_e, first_p)
    n_e, n_p = int(e_offs[-1]), int(p_offs[-1])
    sizes = [n + 1, n_e, n_e, n_e, n + 1, n_p] + [n] * 4 + [4 * n, 4 * n] + [n] * 5
    head = 2 + len(sizes)  # n, then where each array starts and where the last ends
    bounds = list(_accumulate(sizes, initial=head))
    out = np.empty(bounds[-1], np.int32)  # the arrays written in place (views of out)
    out[0] = n
    out[1:head] = bounds
    (e_off, e_lo, e_hi, e_t, p_off, p_t, callee, cret, tail, end, k4, l4, tick, need, lfree, lneed,
     kbytes) = (out[x:y] for x, y in zip(bounds[:-1], bounds[1:]))
    k4, l4 = k4.reshape(n, 4), l4.reshape(n, 4)
    # the layout's part, then the grammar's own (its offsets go on from the layout's last)
    at_n = at_e = at_p = 0
    for part_e_off, part_flat, part_p_off, part_p_t in ([pre] if size else []) + [(e_offs, flat, p_offs, targets)]:
        e_off[at_n : at_n + len(part_e_off)] = part_e_off
        p_off[at_n : at_n + len(part_p_off)] = part_p_off
        k = at_e + len(part_flat)
        e_lo[at_e:k], e_hi[at_e:k], e_t[at_e:k] = part_flat[:, 0], part_flat[:, 1], part_flat[:, 2]
        p_t[at_p : at_p + len(part_p_t)] = part_p_t
        at_n, at_e, at_p = at_n + len(part_e_off) - 1, k, at_p + len(part_p_t)
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


def _edges_of(edges, eps, first_e=0, first_p=0):
    """(edge offsets from first_e, (lo, hi, target) rows, epsilon offsets from first_p,
    epsilon targets) of the nodes whose edges and epsilons are the lists edges and eps.
    itertools and np.fromiter, not ufuncs' reduce / accumulate nor np.cumsum: a process
    forked after set-up (the shared harness) pays the first reduction of its life in ~20
    pages of the parent's (numpy's reduction machinery), np.cumsum more (its Python
    wrapper)."""
    e_off = np.fromiter(_accumulate(map(len, edges), initial=first_e), np.int32, len(edges) + 1)
    p_off = np.fromiter(_accumulate(map(len, eps), initial=first_p), np.int32, len(eps) + 1)
    flat = np.fromiter(_chain(_chain(edges)), np.int32, 3 * (int(e_off[-1]) - first_e)).reshape(-1, 3)
    targets = np.fromiter(_chain(eps), np.int32, int(p_off[-1]) - first_p)
    return e_off, flat, p_off, targets


def layout_edges(lay):
    """_edges_of the nodes of the layout lay (nfa._Layout: the lasting rules at node 0,
    their edges absolute node numbers, the same in every grammar that copies them), made
    at its first pack and kept on it, read-only."""
    hit = lay.packed
    if hit is None:
        hit = _edges_of(lay.edges, lay.eps)
        for x in hit:
            x.setflags(write=False)
        lay.packed = hit
    return hit
