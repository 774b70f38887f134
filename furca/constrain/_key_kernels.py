"""A key-trie state's mask in two kernel calls (key_masks.KeyTrieMasks, with the row
kernel: core_rows.Core.key_split / key_words): the split of the state's configurations,
and its words from the trie's shared "any key" words (the closers' subtrees cleared,
the declared names' literals and their continuation walks, the other configurations'
recording walk, the return nodes merged). The same arithmetic as key_masks.py's Python
path, which stays for the rare cases these return FAIL on (a walk that needs Python: a
row past the kernel's limits, its budget of rows spent, a table full) and for grammars
without the row kernel. Imported only when numba is installed; kernels at module level
(numba's disk cache: see _walk_kernels.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._core_kernels import ROW_WORK, _live, closure, unflat
from ._core_tables import ROOM, _sort_dedup, intern
from ._core_walk_kernels import walk_roots_core

FAIL = -1  # key_words: the kernel stopped; Python computes the mask (key_masks.py)
FULL = -2  # key_words: more return nodes than its buffer holds (the caller grows it; Python computes this mask)
REC_CAP = 1025  # return nodes one walk may record here (rec[0] the count): past it, FAIL


@njit(cache=True, nogil=True)
def split_key(s, pool, sinfo, stk, marks, other_ret, out):
    """KeyTrieMasks.split over the kernel's tables: (key of the one configuration of
    state s on a key trie node, n) with the configurations D written to out[:n] (every
    configuration but that one and those inside its call of `other`: a frame returning
    to other_ret[k] whose parent is its stack); (-1, 0) where no configuration or
    several sit on one; (ROOM, m) where one does and out is shorter than s's m
    configurations."""
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    hit = -1
    for i in range(m):
        if marks[pool[o + i] >> 32]:
            if hit >= 0:
                return np.int64(-1), 0
            hit = i
    if hit < 0:
        return np.int64(-1), 0
    if m > out.shape[0]:
        return np.int64(ROOM), m
    kk = pool[o + hit]
    st_k = kk & 0xFFFFFFFF
    ret = other_ret[kk >> 32]
    n = 0
    for i in range(m):
        if i == hit:
            continue
        key = pool[o + i]
        x = key & 0xFFFFFFFF
        inside = False
        while x:
            if stk[x, 1] == st_k and stk[x, 0] == ret:
                inside = True
                break
            x = stk[x, 1]
        if not inside:
            out[n] = key
            n += 1
    return kk, n


@njit(cache=True, nogil=True, inline="always")
def _one_byte(n, e_off, e_lo, e_hi, tick):
    """Whether NFA node n's only edge reads one byte value (and n counts nothing)."""
    q = e_off[n]
    return e_off[n + 1] - q == 1 and e_lo[q] == e_hi[q] and not tick[n]


@njit(cache=True, nogil=True, inline="always")
def _child(x, b, byte, end):
    """The child of DFS node x on byte b, or -1 (a scan of x's children)."""
    c = x + 1
    stop = end[x]
    while c < stop and byte[c] < b:
        c = end[c]
    if c < stop and byte[c] == b:
        return c
    return -1


@njit(cache=True, nogil=True, inline="always")
def _set_tokens(x, words, tok_start, tok_ids):
    one = np.uint32(1)
    for q in range(tok_start[x], tok_start[x + 1]):
        t = tok_ids[q]
        words[t >> 5] |= one << np.uint32(t & 31)


@njit(cache=True, nogil=True, inline="always")
def _push(found, nf, v):
    """found[nf] = v; the new count, or -1 where found is full."""
    if nf >= found.shape[0]:
        return -1
    found[nf] = v
    return nf + 1


@njit(cache=True, nogil=True)
def literal_configs(s, pool, sinfo, F, out):
    """State s's m configurations (int64 keys) into out (m long); returns how many of them
    sit on a one-byte node (_one_byte: key_words walks those down their literal)."""
    P = unflat(F)
    e_off, e_lo, e_hi, tick = P[0], P[1], P[2], P[12]
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    k = 0
    for i in range(m):
        key = pool[o + i]
        out[i] = key
        if _one_byte(key >> 32, e_off, e_lo, e_hi, tick):
            k += 1
    return k


@njit(cache=True, nogil=True)
def key_words(words, roots, closers, rest, nrest, others, stack, rec, found, keep, depth, byte, end, tok_start,
              tok_ids, dfs_rest, trans, rows, acc, lim, short, room, full, made, F, stk, sh, cnt, pool, sinfo, hh,
              buf, ws, rel, seen, sts, cuts, has_need, cmemo, fmemo, froom, under, root_child):
    """KeyTrieMasks.words after the "any key" words: words (their copy) with the tokens
    below the closers' trie nodes cleared and those the configurations rest[:nrest]
    allow set; returns the count n of the return nodes in found[:n], or FAIL (FULL:
    found has no room for them). The return nodes: roots less those below a closer,
    plus, where anything was found, the nodes where a declared name's literal or
    continuation walk, or the other configurations' recording walk, returned (then
    sorted and distinct, as trie_walks.merged_roots). others, rec and found: the
    caller's scratch (others: nrest long; rec: a recording walk's buffer, REC_CAP
    long). A configuration on a one-byte node walks the trie down its literal
    (KeyTrieMasks._literal_walks: its plain run, then byte by byte through the
    closures), and continues below the trie node where the literal reaches a state of
    its own; the others are one state, walked over the whole trie. Those walks
    (walk_roots_core, recording) come last, one after the other, and share the row
    budget cnt[3] set by the caller."""
    P = unflat(F)
    e_off, e_lo, e_hi, e_t, p_off = P[0], P[1], P[2], P[3], P[4]
    callee, is_end, k4, l4, tick, need = P[6], P[9], P[10], P[11], P[12], P[13]
    one = np.uint32(1)
    nc = closers.shape[0]
    for c in range(nc):
        x = closers[c]
        for q in range(tok_start[x], tok_start[end[x]]):
            t = tok_ids[q]
            words[t >> 5] &= ~(one << np.uint32(t & 31))
    nf = 0
    for r in range(roots.shape[0]):
        x = roots[r]
        below = False
        for c in range(nc):
            if closers[c] <= x < end[closers[c]]:
                below = True
                break
        if not below:
            nf = _push(found, nf, x)
            if nf < 0:
                return FULL
    added = False
    no = 0  # the configurations not on a literal, in others[:no] (one state)
    walks = np.empty((nrest + 1, 2), np.int64)  # (trie node, state) of the walks below the literals, then the others'
    nw = 0
    for ci in range(nrest):
        key = rest[ci]
        node = key >> 32
        st = key & 0xFFFFFFFF
        if not _one_byte(node, e_off, e_lo, e_hi, tick):
            others[no] = key
            no += 1
            continue
        # the plain run: bytes to nodes whose closure is themselves under any stack
        x = 0
        n = node
        while True:
            q = e_off[n]
            t = e_t[q]
            if (p_off[t + 1] > p_off[t] or is_end[t] or callee[t] >= 0 or k4[t, 0] >= 0 or l4[t, 0] >= 0
                    or need[t] >= 0 or not _one_byte(t, e_off, e_lo, e_hi, tick)):
                break
            y = _child(x, e_lo[q], byte, end)
            if y < 0:
                x = -1
                break
            _set_tokens(y, words, tok_start, tok_ids)
            x = y
            n = t
        while x >= 0:
            q = e_off[n]
            t = e_t[q]
            x = _child(x, e_lo[q], byte, end)
            if x < 0:
                break
            cnt[4] = ROW_WORK
            nb, accept = closure(t, st, P, stk, sh, cnt, buf, 0, ws, rel, seen)
            if nb < 0:
                return FAIL
            if has_need:
                nb = _live(buf, nb, P, stk)
            nb = _sort_dedup(buf, nb)
            if nb == 0 and not accept:
                break  # dead after this byte
            _set_tokens(x, words, tok_start, tok_ids)
            if (not accept and nb == 1 and buf[0] == (np.int64(t) << 32 | st)
                    and _one_byte(t, e_off, e_lo, e_hi, tick)):
                n = t
                continue  # still on the literal
            if accept:  # the rule returns here
                nf = _push(found, nf, x)
                if nf < 0:
                    return FULL
                added = True
            if nb:  # the literal's state: walked below x
                if cnt[2] + 3 > rows.shape[0]:
                    return FAIL
                s = intern(buf, nb, accept, pool, sinfo, hh, cnt)
                if s < 0:
                    return FAIL
                acc[s] = sinfo[s, 2] != 0
                walks[nw, 0] = x
                walks[nw, 1] = s
                nw += 1
            break
    if no:  # the other configurations: one state, walked over the whole trie
        for q in range(no):
            buf[q] = others[q]
        nb = _sort_dedup(buf, no)
        if cnt[2] + 3 > rows.shape[0]:
            return FAIL
        s = intern(buf, nb, False, pool, sinfo, hh, cnt)
        if s <= 0:
            return FAIL
        acc[s] = False
        walks[nw, 0] = 0
        walks[nw, 1] = s
        nw += 1
    root = np.zeros(1, np.int32)
    for w in range(nw):
        root[0] = walks[w, 0]
        rec[0] = 0
        j, _i = walk_roots_core(0, -1, root, walks[w, 1], stack, words, rec, keep, depth, byte, end, tok_start,
                                tok_ids, dfs_rest, trans, rows, acc, lim, short, room, full, made, F, stk, sh, cnt,
                                pool, sinfo, hh, buf, ws, rel, seen, sts, cuts, has_need, cmemo, fmemo, froom,
                                under, root_child)
        if j < 1:
            return FAIL
        for q in range(rec[0]):
            nf = _push(found, nf, rec[q + 1])
            if nf < 0:
                return FULL
            added = True
    if added:  # sorted, distinct
        nf = _sort_dedup(found, nf)
    return nf
