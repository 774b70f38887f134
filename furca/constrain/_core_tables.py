"""The row kernel's tables (core_rows.Core): stacks (ret, parent, count, depth) and
states (sorted node << 32 | stack keys in a pool, accept), each with an open-addressing
hash table, under the automaton's ids; `push` and `intern` find or add one, the inserts
enter ids made elsewhere (Python's, or after a table grew). The kernels that compute
rows over them are _core_kernels.py. Imported only when numba is installed; kernels at
module level (numba's disk cache: see _walk_kernels.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

MAXDEPTH = 512  # stacks.MAX_STACK_DEPTH
LIMIT = -1  # past a limit of the automaton (Python raises it)
ROOM = -2  # the kernel's tables are full (grow them, then again)


@njit(cache=True, nogil=True, inline="always")
def _mix(h):
    h ^= h >> 31
    h *= 0x5851F42D4C957F2D
    h ^= h >> 29
    return h


@njit(cache=True, nogil=True)
def push(ret, par, k, stk, sh, cnt):
    mask = sh.shape[0] - 1
    h = _mix((np.int64(ret) * 1000003 + np.int64(par)) * 31 + k) & mask
    while True:
        x = sh[h]
        if x < 0:
            break
        if stk[x, 0] == ret and stk[x, 1] == par and stk[x, 2] == k:
            return x
        h = (h + 1) & mask
    sid = cnt[0]
    d = stk[par, 3] + 1
    if d > MAXDEPTH:
        return LIMIT
    if sid >= stk.shape[0] or 2 * sid >= sh.shape[0]:
        return ROOM
    stk[sid, 0] = ret
    stk[sid, 1] = par
    stk[sid, 2] = k
    stk[sid, 3] = d
    sh[h] = sid
    cnt[0] = sid + 1
    return sid


@njit(cache=True, nogil=True)
def _sort_dedup(buf, m):
    if m > 1:
        if m <= 16:
            for i in range(1, m):
                v = buf[i]
                j = i - 1
                while j >= 0 and buf[j] > v:
                    buf[j + 1] = buf[j]
                    j -= 1
                buf[j + 1] = v
        else:
            buf[:m] = np.sort(buf[:m])
        w = 1
        for i in range(1, m):
            if buf[i] != buf[w - 1]:
                buf[w] = buf[i]
                w += 1
        m = w
    return m


@njit(cache=True, nogil=True, inline="always")
def _probe(keys, m, acc, pool, sinfo, hh):
    """(the id of the state keys[:m], acc in the table or -1, the slot it is at or would go)."""
    mask = hh.shape[0] - 1
    h = np.int64(acc) + 7
    for i in range(m):
        h = _mix(h * 1000003 + keys[i])
    h &= mask
    while True:
        x = hh[h]
        if x < 0:
            return -1, h
        if sinfo[x, 1] == m and sinfo[x, 2] == acc:
            o = sinfo[x, 0]
            same = True
            for i in range(m):
                if pool[o + i] != keys[i]:
                    same = False
                    break
            if same:
                return x, h
        h = (h + 1) & mask


@njit(cache=True, nogil=True)
def intern(keys, m, acc, pool, sinfo, hh, cnt):
    """keys[:m] sorted and distinct (node << 32 | stack); the state id (0: dead, no
    configuration and not accepting), LIMIT past cnt[6] configurations (the automaton's
    MAX_CONFIGS), ROOM when a table is full. Python's new states come here too
    (core_rows.Core.intern)."""
    if m == 0 and not acc:
        return 0
    if m > cnt[6]:
        return LIMIT
    x, h = _probe(keys, m, acc, pool, sinfo, hh)
    if x >= 0:
        return x
    sid = cnt[2]
    o = cnt[1]
    if sid >= sinfo.shape[0] or 2 * sid >= hh.shape[0] or o + m > pool.shape[0]:
        return ROOM
    for i in range(m):
        pool[o + i] = keys[i]
    sinfo[sid, 0] = o
    sinfo[sid, 1] = m
    sinfo[sid, 2] = acc
    hh[h] = sid
    cnt[1] = o + m
    cnt[2] = sid + 1
    return sid


@njit(cache=True, nogil=True)
def insert_stacks(first, stop, stk, sh):
    """Enters the stacks first .. stop - 1 (their frames already in stk) into the hash table."""
    mask = sh.shape[0] - 1
    for sid in range(first, stop):
        h = _mix((np.int64(stk[sid, 0]) * 1000003 + np.int64(stk[sid, 1])) * 31 + stk[sid, 2]) & mask
        while sh[h] >= 0:
            h = (h + 1) & mask
        sh[h] = sid


@njit(cache=True, nogil=True)
def insert_states(first, stop, pool, sinfo, hh):
    """Enters the states first .. stop - 1 (their keys in pool, sinfo set) into the hash table."""
    mask = hh.shape[0] - 1
    for sid in range(first, stop):
        o = sinfo[sid, 0]
        m = sinfo[sid, 1]
        h = np.int64(sinfo[sid, 2]) + 7
        for i in range(m):
            h = _mix(h * 1000003 + pool[o + i])
        h &= mask
        while hh[h] >= 0:
            h = (h + 1) & mask
        hh[h] = sid
