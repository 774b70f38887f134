"""The compiled transition rows of `core_rows` (imported only when numba is installed).

A row is computed from the packed NFA (core_rows.pack: edges and eps in CSR form, per
node its call, counter, length, tick and need facts) with the semantics of closures.py
and rows.py: closures follow epsilons, calls (a frame pushed, none for a tail call),
counter and length entries (a frame with count 1), rule ends (returning through the top
frame: a call frame to its return node, a counter frame runs the body again below its
maximum and leaves at or past its minimum, a length frame leaves past its minimum, the
context frame CUT_RET and the empty stack accept); a tick byte counts a character in the
top length frame (dead past its maximum); `need` drops the configurations that cannot
fit. Stacks and states are interned in the kernel's tables, which mirror the
automaton's (the same ids: core_rows.Core keeps them in step).

Kernels are at module level (numba's disk cache keys them by their globals: see
_walk_kernels.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._walk_kernels import node_state

CUT_RET = -2  # stacks.CUT_RET (a leaf module imports nothing of furca)
MAXDEPTH = 512  # stacks.MAX_STACK_DEPTH
MAX_CONFIGS = 4096  # automaton.MAX_CONFIGS
LIMIT = -1  # a row past a limit of the automaton (Python's row raises it)
ROOM = -2  # the kernel's tables are full (grow them, then again)
ROW_WORK = 512  # closure steps of one row before it is left to Python
PAST = -3  # _byte_stack: past a length region's maximum (the configuration takes no byte)


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


@njit(cache=True, nogil=True)
def intern(keys, m, acc, pool, sinfo, hh, cnt):
    """keys[:m] sorted and distinct (node << 32 | stack); the state id (0: dead, no
    configuration and not accepting), LIMIT past MAX_CONFIGS, ROOM when a table is full."""
    if m == 0 and not acc:
        return 0
    if m > MAX_CONFIGS:
        return LIMIT
    mask = hh.shape[0] - 1
    h = np.int64(acc) + 7
    for i in range(m):
        h = _mix(h * 1000003 + keys[i])
    h &= mask
    while True:
        x = hh[h]
        if x < 0:
            break
        if sinfo[x, 1] == m and sinfo[x, 2] == acc:
            o = sinfo[x, 0]
            same = True
            for i in range(m):
                if pool[o + i] != keys[i]:
                    same = False
                    break
            if same:
                return x
        h = (h + 1) & mask
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
def row(s, P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need):
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
            if has_need:
                nb = _live(buf, nb, P, stk)
            nb = _sort_dedup(buf, nb)
            sid = intern(buf, nb, acc, pool, sinfo, hh, cnt)
            if sid < 0:
                return sid
            trans[s, lo:hi] = sid
        lo = hi
    return 0


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


@njit(cache=True, nogil=True)
def _row_inline(ps, trans, rows, acc, made, P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, sts, cuts,
                has_need):
    """ps's row made inside a walk (row()), with the per-state tables of its new
    successors (accepting) set, ps walkable (rows) and noted in made[cnt[5]] (the caller
    marks it expanded once the new states are the automaton's too: a reader that takes
    no lock steps only through expanded states); False where the walk must return
    to Python (no room in the per-state arrays for a row's new states, or row() failed)."""
    n0 = cnt[2]
    if n0 + 257 > rows.shape[0] or n0 + 257 > trans.shape[0]:
        return False
    if row(ps, P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need) != 0:
        return False
    for sid in range(n0, cnt[2]):
        acc[sid] = sinfo[sid, 2] != 0
    made[cnt[5]] = ps
    cnt[5] += 1
    rows[ps] = True
    return True


@njit(cache=True, nogil=True)
def walk_roots_core(j, i, roots, start, stack, words, rec, keep, depth, byte, end, tok_start, tok_ids, rest,
                    trans, rows, acc, lim, short, room, full, made, P, stk, sh, cnt, pool, sinfo, hh, buf, ws,
                    rel, seen, sts, cuts, has_need, cmemo, fmemo, froom):
    """_walk_kernels.walk_roots (walk_range's loop written in: a call per root would pass
    its ~35 arrays, their reference counts, for each of up to 10^4 roots), making the
    rows it needs itself (core_rows.Core; the arguments that change from call to call
    first, the rest kept by the caller as one tuple) and mapping new states to their
    canonical forms (map_short): it returns to Python only where a counter state walked
    past its room takes one byte (trie_walks.resume), a row or a mapping could not be
    made here, or the call's budget of rows and mappings is spent. roots = [0] walks the
    whole trie (stack[0] set by the caller)."""
    one = np.uint32(1)
    cap = rec.shape[0]
    record = cap > 1
    nr = roots.shape[0]
    while j < nr:
        x = roots[j]
        stop = end[x]
        if i <= x:
            stack[depth[x]] = start
            i = x + 1
        while i < stop:
            if not keep[i]:
                i = end[i]
                continue
            ps = stack[depth[i] - 1]
            r = rest[i]
            if not rows[ps] and (room[ps] == 0 or r < room[ps]):
                if cnt[3] <= 0:  # this call's budget of rows spent: Python makes this one (and checks its deadline)
                    return j, i
                cnt[3] -= 1
                if not _row_inline(ps, trans, rows, acc, made, P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel,
                                   seen, sts, cuts, has_need):
                    return j, i
            s = node_state(ps, byte[i], r, trans, rows, lim, short, room, full)
            if s < 0:
                t = trans[ps, byte[i]] if rows[ps] else -1
                if t <= 0 or short[t] != 0 or cnt[3] <= 0 or cnt[2] + 3 > rows.shape[0]:
                    return j, i
                cnt[3] -= 1  # t's canonical forms mapped here (automaton.map_short)
                if map_short(t, lim, short, full, room, acc, P, stk, sh, cnt, pool, sinfo, hh, buf, cmemo, fmemo,
                             froom) != 0:
                    return j, i
                s = node_state(ps, byte[i], r, trans, rows, lim, short, room, full)
            if s == 0:
                i = end[i]
                continue
            if record and acc[s]:
                c = rec[0]
                if c + 1 >= cap:
                    return j, i
                rec[c + 1] = i
                rec[0] = c + 1
            stack[depth[i]] = s
            for k in range(tok_start[i], tok_start[i + 1]):
                t = tok_ids[k]
                words[t >> 5] |= one << np.uint32(t & 31)
            i += 1
        j += 1
        i = -1
    return j, i


@njit(cache=True, nogil=True)
def _unknown(st, stk, memo):
    """(chain, n, x): the frames of st above x, the deepest with memo[x] known (or the
    empty stack), in chain[:n] top first."""
    chain = np.empty(stk[st, 3], np.int32)
    n = 0
    x = st
    while x != 0 and memo[x] < 0:
        chain[n] = x
        n += 1
        x = stk[x, 1]
    return chain, n, x


@njit(cache=True, nogil=True)
def _canon_stack(st, bound, P, stk, sh, cnt, memo):
    """automaton._canonical_stack: st with every counter or length frame whose room
    exceeds bound bytes at its canonical count (memo[st]: the result, -1 unknown; the
    frames below first). LIMIT / ROOM from push."""
    if st == 0:
        return 0
    if memo[st] >= 0:
        return memo[st]
    k4, l4, lfree, lneed, kbytes = P[10], P[11], P[14], P[15], P[16]
    chain, n, x = _unknown(st, stk, memo)
    p = memo[x] if x != 0 else 0
    for q in range(n - 1, -1, -1):
        y = chain[q]
        ret = stk[y, 0]
        k = stk[y, 2]
        if k and ret >= 0 and l4[ret, 0] >= 0:
            free = lfree[ret]
            if free >= 0:
                lo = l4[ret, 2]
                hi = l4[ret, 3]
                if k > lo and hi - (k - 1) >= bound + lneed[ret]:
                    ret = free
                    k = lo + 1
        elif k and ret >= 0:
            lo = k4[ret, 2]
            hi = k4[ret, 3]
            b = kbytes[ret]
            if k >= lo and hi - k > (bound + b - 1) // b:
                k = max(lo, 1)
        if ret == stk[y, 0] and p == stk[y, 1] and k == stk[y, 2]:
            c = y
        else:
            c = push(ret, p, k, stk, sh, cnt)
            if c < 0:
                return c
        memo[y] = c
        p = c
    return p


@njit(cache=True, nogil=True)
def _full_stack(st, P, stk, sh, cnt, fmemo, froom):
    """automaton._full_stack: (st with its frames moved as full_canonical, the least
    room of a moved frame: 1 << 30 when none moved); memo in fmemo / froom (-1 unknown)."""
    if st == 0:
        return 0, 1 << 30
    if fmemo[st] >= 0:
        return fmemo[st], froom[st]
    k4, l4, lfree, lneed, kbytes = P[10], P[11], P[14], P[15], P[16]
    chain, n, x = _unknown(st, stk, fmemo)
    if x != 0:
        p = fmemo[x]
        room = froom[x]
    else:
        p = 0
        room = 1 << 30
    for q in range(n - 1, -1, -1):
        y = chain[q]
        ret = stk[y, 0]
        k = stk[y, 2]
        if k and ret >= 0 and l4[ret, 0] >= 0:
            free = lfree[ret]
            if free >= 0:
                lo = l4[ret, 2]
                hi = l4[ret, 3]
                r = hi - (k - 1) - lneed[ret]
                if k > lo and r > 0:
                    room = min(room, r)
                    ret = free
                    k = lo + 1
        elif k and ret >= 0:
            lo = k4[ret, 2]
            hi = k4[ret, 3]
            c = max(lo, 1)
            if k >= lo and k != c:
                room = min(room, (hi - k) * kbytes[ret] + 1)
                k = c
        if ret == stk[y, 0] and p == stk[y, 1] and k == stk[y, 2]:
            c2 = y
        else:
            c2 = push(ret, p, k, stk, sh, cnt)
            if c2 < 0:
                return c2, room
        fmemo[y] = c2
        froom[y] = room
        p = c2
    return p, room


@njit(cache=True, nogil=True)
def map_short(s, lim, short, full, room, acc, P, stk, sh, cnt, pool, sinfo, hh, buf, cmemo, fmemo, froom):
    """automaton.map_short: short[s] = canonical_short(s) (bound lim), full[s], room[s] =
    full_canonical(s), the new states' accepting flags set. Returns 0, or LIMIT / ROOM."""
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    a = sinfo[s, 2] != 0
    if m > buf.shape[0]:
        return LIMIT
    n0 = cnt[2]
    same = True
    for i in range(m):
        key = pool[o + i]
        st = np.int32(key & 0xFFFFFFFF)
        c = _canon_stack(st, lim, P, stk, sh, cnt, cmemo)
        if c < 0:
            return c
        if c != st:
            same = False
        buf[i] = ((key >> 32) << 32) | c
    if same:
        cs = s
    else:
        mm = _sort_dedup(buf, m)
        cs = intern(buf, mm, a, pool, sinfo, hh, cnt)
        if cs < 0:
            return cs
    rm = 1 << 30
    same = True
    for i in range(m):
        key = pool[o + i]
        st = np.int32(key & 0xFFFFFFFF)
        f, r = _full_stack(st, P, stk, sh, cnt, fmemo, froom)
        if f < 0:
            return f
        if r < rm:
            rm = r
        buf[i] = ((key >> 32) << 32) | f
    if rm == 1 << 30:
        fs = s
        rm = 0
    else:
        mm = _sort_dedup(buf, m)
        fs = intern(buf, mm, a, pool, sinfo, hh, cnt)
        if fs < 0:
            return fs
    for sid in range(n0, cnt[2]):
        acc[sid] = sinfo[sid, 2] != 0
    full[s] = fs
    room[s] = rm
    short[s] = cs
    return 0
