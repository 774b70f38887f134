"""The compiled transition rows of `core_rows` (imported only when numba is installed).

A row is computed from the packed NFA (core_rows.pack: edges and eps in CSR form, per
node its call, counter, length, tick and need facts) with the semantics of closures.py
and rows.py: closures follow epsilons, calls (a frame pushed, none for a tail call),
counter and length entries (a frame with count 1), rule ends (returning through the top
frame: a call frame to its return node, a counter frame runs the body again below its
maximum and leaves at or past its minimum, a length frame leaves past its minimum, the
context frame CUT_RET and the empty stack accept); a tick byte counts a character in the
top length frame (dead past its maximum); `need` drops the configurations that cannot
fit. Stacks and states are interned in the kernel's tables (_core_tables.py), which mirror the
automaton's (the same ids: core_rows.Core keeps them in step).

The walk that makes rows and canonical forms inside it is _core_walk_kernels.py.
Kernels are at module level (numba's disk cache keys them by their globals: see
_walk_kernels.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._core_tables import LIMIT, ROOM, _mix, _sort_dedup, intern, push

CUT_RET = -2  # stacks.CUT_RET (a leaf module imports nothing of furca)
ROW_WORK = 512  # closure steps of one row before it is left to Python
PAST = -3  # _byte_stack: past a length region's maximum (the configuration takes no byte)


@njit(cache=True, nogil=True, inline="always")
def unflat(F):
    """The packed NFA's arrays (core_rows.pack's order) as views of its one int32 array
    F: F[0] the node count n, F[1 + k] .. F[2 + k] the span of array k; k4 and l4 are
    (n, 4)."""
    n = np.intp(F[0])
    return (F[F[1]:F[2]], F[F[2]:F[3]], F[F[3]:F[4]], F[F[4]:F[5]], F[F[5]:F[6]], F[F[6]:F[7]], F[F[7]:F[8]],
            F[F[8]:F[9]], F[F[9]:F[10]], F[F[10]:F[11]], F[F[11]:F[12]].reshape((n, 4)),
            F[F[12]:F[13]].reshape((n, 4)), F[F[13]:F[14]], F[F[14]:F[15]], F[F[15]:F[16]], F[F[16]:F[17]],
            F[F[17]:F[18]])


@njit(cache=True, nogil=True, inline="always")
def _chain(rel, nrel, parent, ret, k):
    """The id of the chain `parent` with (ret, k) on top (interned by content in rel[:nrel]);
    (id, new nrel), id -1 when rel is full."""
    for i in range(1, nrel):
        if rel[i, 0] == parent and rel[i, 1] == ret and rel[i, 2] == k:
            return i, nrel
    if nrel >= rel.shape[0]:
        return LIMIT, nrel
    rel[nrel, 0] = parent
    rel[nrel, 1] = ret
    rel[nrel, 2] = k
    return nrel, nrel + 1


@njit(cache=True, nogil=True, inline="always")
def _item(ws, top, node, chain, base):
    """Puts (node, chain, base) on the closure's work list at top; the new top."""
    ws[top, 0] = node
    ws[top, 1] = chain
    ws[top, 2] = base
    return top + 1


@njit(cache=True, nogil=True)
def closure(node, st, P, stk, sh, cnt, out, m, ws, rel, seen):
    """Appends to out[m:] the configurations (node << 32 | stack) with byte edges reachable
    from (node, st) without consuming (closures.Closures.closure, before `live`);
    returns (new m, accept) or (-1, _) on a limit. ws: a work buffer of int64 pairs
    (node, relative chain) and rel: the chains (parent, ret, k) pushed above the stack
    they start from; seen: a scratch hash of visited (node, chain, base stack)."""
    e_off, e_lo, e_hi, e_t, p_off, p_t, callee, cret, tail, end, k4, l4, tick = P[:13]
    acc = False
    # items: (node, chain, base stack): frames of chain pushed on base
    nrel = 1
    rel[0, 0] = -1
    rel[0, 1] = 0
    rel[0, 2] = 0
    top = _item(ws, 0, node, 0, st)
    # seen[h] = (node, chain, base, generation): slots of older calls count as empty
    seen[0, 3] += 1
    gen = seen[0, 3]
    smask = seen.shape[0] - 1
    nseen = 0
    while top:
        top -= 1
        n = ws[top, 0]
        c = ws[top, 1]
        base = ws[top, 2]
        # dedupe (n, c, base)
        h = (_mix((np.int64(n) * 1000003 + c) * 1000033 + base) & smask) | 1  # slot 0 holds the generation
        dup = False
        while True:
            if seen[h, 3] != gen:
                break
            if seen[h, 0] == n and seen[h, 1] == c and seen[h, 2] == base:
                dup = True
                break
            h = ((h + 1) & smask) | 1
        if dup:
            continue
        nseen += 1
        cnt[4] -= 1
        if 4 * nseen >= seen.shape[0] or cnt[4] < 0:  # a closure too big for the scratch, a row past its work
            return LIMIT, acc
        seen[h, 0] = n
        seen[h, 1] = c
        seen[h, 2] = base
        seen[h, 3] = gen
        if e_off[n + 1] > e_off[n]:
            # materialise the chain on base: frames bottom first
            x = base
            if c:
                # collect chain frames top-down then push bottom-up
                depth = 0
                y = c
                while y:
                    depth += 1
                    y = rel[y, 0]
                # push bottom first: walk again from each depth
                for d in range(depth - 1, -1, -1):
                    y = c
                    for _ in range(d):
                        y = rel[y, 0]
                    x = push(rel[y, 1], x, rel[y, 2], stk, sh, cnt)
                    if x < 0:
                        return x, acc
            if m >= out.shape[0]:
                return LIMIT, acc
            out[m] = (np.int64(n) << 32) | x
            m += 1
        for j in range(p_off[n], p_off[n + 1]):
            if top + 5 >= ws.shape[0]:  # room for this one and the call, counter or length items below
                return LIMIT, acc
            top = _item(ws, top, p_t[j], c, base)
        f = callee[n]
        if f >= 0:
            r = cret[n]
            if tail[r]:
                c2 = c
            else:
                c2, nrel = _chain(rel, nrel, c, r, 0)
                if c2 < 0:
                    return LIMIT, acc
            top = _item(ws, top, f, c2, base)
        if k4[n, 0] >= 0:
            c2, nrel = _chain(rel, nrel, c, n, 1)
            if c2 < 0:
                return LIMIT, acc
            top = _item(ws, top, k4[n, 0], c2, base)
            if k4[n, 2] == 0:
                top = _item(ws, top, k4[n, 1], c, base)
        if l4[n, 0] >= 0:
            c2, nrel = _chain(rel, nrel, c, n, 1)
            if c2 < 0:
                return LIMIT, acc
            top = _item(ws, top, l4[n, 0], c2, base)
        if end[n]:
            # return through the top frame: of the chain if any, else of base
            if c:
                ret = rel[c, 1]
                k = rel[c, 2]
                parent_c = rel[c, 0]
                pbase = base
                from_chain = True
            else:
                if base == 0:
                    acc = True
                    continue
                ret = stk[base, 0]
                if ret == CUT_RET:
                    acc = True
                    continue
                k = stk[base, 2]
                parent_c = 0
                pbase = stk[base, 1]
                from_chain = False
            if top + 2 >= ws.shape[0]:
                return LIMIT, acc
            if k == 0:
                top = _item(ws, top, ret, parent_c, pbase)
            elif l4[ret, 0] >= 0:
                if k > l4[ret, 2]:
                    top = _item(ws, top, l4[ret, 1], parent_c, pbase)
            else:
                if k < k4[ret, 3]:
                    # body again with k + 1: a frame (ret, k + 1) on the parent
                    if from_chain:
                        c2, nrel = _chain(rel, nrel, parent_c, ret, k + 1)
                        if c2 < 0:
                            return LIMIT, acc
                        top = _item(ws, top, k4[ret, 0], c2, pbase)
                    else:
                        x = push(ret, pbase, k + 1, stk, sh, cnt)
                        if x < 0:
                            return x, acc
                        top = _item(ws, top, k4[ret, 0], 0, x)
                if k >= k4[ret, 2]:
                    top = _item(ws, top, k4[ret, 1], parent_c, pbase)
        if top >= ws.shape[0] - 4:
            return LIMIT, acc
    return m, acc


@njit(cache=True, nogil=True)
def _live(out, m, P, stk):
    need, l4 = P[13], P[11]
    w = 0
    for i in range(m):
        n = out[i] >> 32
        d = need[n]
        if d >= 0:
            st = np.int32(out[i] & 0xFFFFFFFF)
            ret = stk[st, 0]
            k = stk[st, 2]
            hi = l4[ret, 3]
            if hi >= 0 and k - 1 + d > hi:
                continue
        out[w] = out[i]
        w += 1
    return w


@njit(cache=True, nogil=True, inline="always")
def _state_of(buf, nb, acc, P, stk, pool, sinfo, hh, cnt, has_need):
    """The state of the configurations buf[:nb] (a closure's, in any order, repeats
    allowed) and acc: the live ones (has_need) sorted, deduplicated, interned."""
    if has_need:
        nb = _live(buf, nb, P, stk)
    nb = _sort_dedup(buf, nb)
    return intern(buf, nb, acc, pool, sinfo, hh, cnt)


@njit(cache=True, nogil=True)
def _byte_stack(n, st, P, stk, sh, cnt):
    tick, l4 = P[12], P[11]
    if not tick[n]:
        return st
    ret = stk[st, 0]
    parent = stk[st, 1]
    k = stk[st, 2]
    lo = l4[ret, 2]
    hi = l4[ret, 3]
    if hi < 0:
        if k > lo:
            return st
        return push(ret, parent, k + 1, stk, sh, cnt)
    if k > hi:
        return PAST
    return push(ret, parent, k + 1, stk, sh, cnt)


@njit(cache=True, nogil=True)
def _row(s, P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need):
    """Writes trans[s], the row of state s (its configurations in pool), interning the
    successors (and their stacks). Returns 0, or LIMIT / ROOM (trans[s] then partial:
    the caller computes it again)."""
    e_off, e_lo, e_hi, e_t = P[0], P[1], P[2], P[3]
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    if m > sts.shape[0]:
        return LIMIT
    # the closures' steps this row may take (the kernel caches no closure: a row of big
    # closures is left to rows.py, whose per-node caches serve them)
    cnt[4] = ROW_WORK
    cuts[:] = False
    cuts[0] = True
    cuts[256] = True
    for i in range(m):
        n = np.int32(pool[o + i] >> 32)
        st = np.int32(pool[o + i] & 0xFFFFFFFF)
        x = _byte_stack(n, st, P, stk, sh, cnt)
        if x == LIMIT or x == ROOM:
            return x
        sts[i] = x
        for j in range(e_off[n], e_off[n + 1]):
            cuts[e_lo[j]] = True
            cuts[e_hi[j] + 1] = True
    trans[s, :] = 0
    lo = 0
    while lo < 256:
        hi = lo + 1
        while not cuts[hi]:
            hi += 1
        nb = 0
        acc = False
        for i in range(m):
            if sts[i] < 0:
                continue
            n = np.int32(pool[o + i] >> 32)
            for j in range(e_off[n], e_off[n + 1]):
                if e_lo[j] <= lo and lo <= e_hi[j]:
                    nb, a = closure(e_t[j], sts[i], P, stk, sh, cnt, buf, nb, ws, rel, seen)
                    if nb < 0:
                        return nb
                    acc |= a
        if nb or acc:
            sid = _state_of(buf, nb, acc, P, stk, pool, sinfo, hh, cnt, has_need)
            if sid < 0:
                return sid
            trans[s, lo:hi] = sid
        lo = hi
    return 0


@njit(cache=True, nogil=True)
def _step_byte(s, b, P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need):
    """trans[s, b] without s's row (automaton._step_byte: the row's successor for byte b
    alone, the stacks after the byte made for the configurations that take b only, as
    rows.py's bucket of b); the state id, or LIMIT / ROOM (Python steps it)."""
    e_off, e_lo, e_hi, e_t = P[0], P[1], P[2], P[3]
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    cnt[4] = ROW_WORK
    nb = 0
    acc = False
    for i in range(m):
        n = np.int32(pool[o + i] >> 32)
        x = PAST
        first = True
        for j in range(e_off[n], e_off[n + 1]):
            if e_lo[j] <= b and b <= e_hi[j]:
                if first:
                    first = False
                    x = _byte_stack(n, np.int32(pool[o + i] & 0xFFFFFFFF), P, stk, sh, cnt)
                    if x == LIMIT or x == ROOM:
                        return x
                if x < 0:  # past a length region's maximum: takes no byte
                    break
                nb, a = closure(e_t[j], x, P, stk, sh, cnt, buf, nb, ws, rel, seen)
                if nb < 0:
                    return nb
                acc |= a
    return _state_of(buf, nb, acc, P, stk, pool, sinfo, hh, cnt, has_need)


@njit(cache=True, nogil=True)
def row(s, F, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need):
    """_row from Python: F the packed NFA (core_rows.pack), one array (a tuple of 18
    arrays cost ~1.1 µs a call in numba's dispatch, one array ~0.1)."""
    return _row(s, unflat(F), stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need)


@njit(cache=True, nogil=True)
def step_byte(s, b, F, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need):
    """_step_byte from Python (F as row's)."""
    return _step_byte(s, b, unflat(F), stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need)


@njit(cache=True, nogil=True)
def after_return(frame, F, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need):
    """The state after a rule end returns through the stack frame `frame`
    (automaton.after_return: closures.return_through's pairs, their closures' union):
    a call frame goes on at its return node; a counter frame with k bodies done runs the
    body again at k + 1 below its maximum and leaves at or past its minimum; a length
    frame leaves past its minimum. The state id, or LIMIT / ROOM (Python makes it)."""
    P = unflat(F)
    k4, l4 = P[10], P[11]
    ret = stk[frame, 0]
    parent = stk[frame, 1]
    k = stk[frame, 2]
    cnt[4] = ROW_WORK
    nb = 0
    acc = False
    for which in range(2):  # at most two pairs: (body, k + 1) and (exit, parent)
        if k == 0:
            if which:
                break
            node, st = ret, parent
        elif l4[ret, 0] >= 0:
            if which or k <= l4[ret, 2]:
                break
            node, st = l4[ret, 1], parent
        elif which == 0:
            if k >= k4[ret, 3]:
                continue
            st = push(ret, parent, k + 1, stk, sh, cnt)
            if st < 0:
                return st
            node = k4[ret, 0]
        else:
            if k < k4[ret, 2]:
                break
            node, st = k4[ret, 1], parent
        nb, a = closure(node, st, P, stk, sh, cnt, buf, nb, ws, rel, seen)
        if nb < 0:
            return nb
        acc |= a
    return _state_of(buf, nb, acc, P, stk, pool, sinfo, hh, cnt, has_need)


@njit(cache=True, nogil=True)
def step_bytes(x, data, stop_acc, trans, rows, acc, F, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need):
    """x stepped over the bytes of data (automaton.step's loop): through its row where
    it has one (a row filled in part: where the byte's entry is set), else by step_byte.
    Returns (j, x, how): how 0, every byte taken (x the state after them); 1, byte j
    leads to the dead state; 2, byte j leads to an accepting state and stop_acc (x the
    state before it: automaton._step_abstract stops there); 3, byte j not stepped here
    (a limit, the tables full, no room in the per-state arrays: x the state before it,
    Python steps on). F: the packed NFA (core_rows.pack)."""
    P = unflat(F)
    for j in range(data.shape[0]):
        b = data[j]
        y = trans[x, b] if rows[x] else -1
        if y < 0:
            n0 = cnt[2]
            if n0 + 1 > acc.shape[0]:
                return j, x, 3
            y = _step_byte(x, b, P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need)
            if y < 0:
                return j, x, 3
            for sid in range(n0, cnt[2]):
                acc[sid] = sinfo[sid, 2] != 0
        if y == 0:
            return j, x, 1
        if stop_acc and acc[y]:
            return j, x, 2
        x = y
    return data.shape[0], x, 0
