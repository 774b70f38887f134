"""The compiled trie walks of `_walk` (imported only when numba is installed; see
_walk.py for what each computes).

Every function is at module level: numba's on-disk cache (``cache=True``) keys a kernel
also by the values of the globals and closure variables it references, and a helper
defined inside a builder function (`node_state`, which the walks call) is a new object in
every process, pickled differently: the cache never hit, every process compiled the walks
again (~1.2 s) and added entries to the cache's index (1,347 files, 77 MB in one
working tree). Here they are the same objects wherever the module is imported, and a
process after the first loads the compiled walks.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def node_state(ps, b, r, trans, rows, lim, short, room, full):
    """The state a walk keeps at a node reached from parent state ps on byte b with r
    bytes left below it: trans[ps, b], or its canonical form (short[s] where r <= lim,
    full[s] where r <= room[s]); 0 dead; -1 where the caller must first give ps its
    row (or this byte of it: -1 in a row filled in part) or map the state (short[s]
    == 0)."""
    if not rows[ps]:
        return -1
    s = trans[ps, b]
    if s <= 0 or lim < 0:
        return s
    c = short[s]
    if c == 0:
        return -1
    if r <= lim:
        return c
    if r <= room[s]:
        return full[s]
    return s


@njit(cache=True, nogil=True)
def walk_range(i, stop, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, acc, rec,
               rest, lim, short, room, full, keep):
    one = np.uint32(1)
    cap = rec.shape[0]
    record = cap > 1
    while i < stop:
        if not keep[i]:
            i = end[i]
            continue
        s = node_state(stack[depth[i] - 1], byte[i], rest[i], trans, rows, lim, short, room, full)
        if s < 0:
            return i
        if s == 0:
            i = end[i]
            continue
        if record and acc[s]:
            c = rec[0]
            if c + 1 >= cap:
                return i
            rec[c + 1] = i
            rec[0] = c + 1
        stack[depth[i]] = s
        for k in range(tok_start[i], tok_start[i + 1]):
            t = tok_ids[k]
            words[t >> 5] |= one << np.uint32(t & 31)
        i += 1
    return stop


@njit(cache=True, nogil=True)
def walk_roots(j, i, roots, start, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words,
               acc, rec, rest, lim, short, room, full, keep):
    """For each root x in roots[j:]: the subtree below x walked from state `start`
    (x's own tokens excluded) by walk_range, recording accepting nodes in rec when
    len(rec) > 1. Returns (j, i) to resume after expanding the parent state of node i (or
    growing rec); j == len(roots) when done. Start with i = -1."""
    nr = roots.shape[0]
    while j < nr:
        x = roots[j]
        stop = end[x]
        if i <= x:
            stack[depth[x]] = start
            i = x + 1
        i = walk_range(i, stop, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, acc, rec,
                       rest, lim, short, room, full, keep)
        if i < stop:
            return j, i
        j += 1
        i = -1
    return j, i


@njit(cache=True, nogil=True)
def clear_bits(words, ids):
    """Clears in words (uint32) the bits of the token ids (int32): bitmask.clear_ids
    (the tokens below a key state's closers: np.bitwise_and.at took ~25 µs for the
    ~1,500 tokens below a lone quote)."""
    for k in range(ids.shape[0]):
        t = ids[k]
        words[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))


@njit(cache=True, nogil=True)
def sparse_words(packed, base, has_base, idx):
    """stored_masks._stored's choice in one pass: (0, n) when packed (int32 words) has at
    most len(idx) - 1 non-zero words, their indices in idx[:n]; else, with has_base,
    (1, n) when it differs from base in at most that many words, their indices in
    idx[:n]; else (2, 0). Each count stops at the first word past the limit."""
    limit = idx.shape[0] - 1
    n = 0
    for w in range(packed.shape[0]):
        if packed[w] != 0:
            if n == limit:
                n = -1
                break
            idx[n] = w
            n += 1
    if n >= 0:
        return 0, n
    if not has_base:
        return 2, 0
    n = 0
    for w in range(packed.shape[0]):
        if packed[w] != base[w]:
            if n == limit:
                return 2, 0
            idx[n] = w
            n += 1
    return 1, n
