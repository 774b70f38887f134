"""The compiled walk of core_rows.Core: _walk_kernels.walk_range's loop making the rows
(_core_kernels.row) and the canonical forms (map_short: automaton.map_short's frame
arithmetic) it meets. Imported only when numba is installed; kernels at module level
(numba's disk cache: see _walk_kernels.py)."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from ._core_kernels import _row, _step_byte, unflat
from ._core_tables import LIMIT, _sort_dedup, intern, push
from ._walk_kernels import node_state


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
    if _row(ps, P, stk, sh, cnt, pool, sinfo, hh, trans, buf, ws, rel, seen, sts, cuts, has_need) != 0:
        return False
    for sid in range(n0, cnt[2]):
        acc[sid] = sinfo[sid, 2] != 0
    made[cnt[5]] = ps
    cnt[5] += 1
    rows[ps] = True
    return True


LOOP_MIN = 16  # the fewest nodes under a trie node for walk_roots_core to try loops_over there


@njit(cache=True, nogil=True)
def walk_roots_core(j, i, roots, start, stack, words, rec, keep, depth, byte, end, tok_start, tok_ids, rest,
                    trans, rows, acc, lim, short, room, full, made, F, stk, sh, cnt, pool, sinfo, hh, buf, ws,
                    rel, seen, sts, cuts, has_need, cmemo, fmemo, froom, below, root_child):
    """_walk_kernels.walk_roots (walk_range's loop written in: a call per root would pass
    its ~35 arrays, their reference counts, for each of up to 10^4 roots), making the
    rows it needs itself (core_rows.Core; the arguments that change from call to call
    first, the rest kept by the caller as one tuple) and mapping new states to their
    canonical forms (map_short), and the one-byte steps of counter states walked past
    their room (trie_walks.resume's, _core_kernels.step_byte): it returns to Python only
    where a row, a step or a mapping could not be made here, or the call's budget of
    rows, steps and mappings is spent. roots = [0] walks the whole trie (stack[0] set by
    the caller). F: the packed NFA (core_rows.pack). At a node whose state is its
    parent's again (a loop: a pattern's letters, a string's characters under a counter
    deep in its range) over a subtree of more than LOOP_MIN nodes, the subtree is taken
    whole where the state loops on every byte below (below: token_trie.subtree_bytes;
    loops_over), without visiting it."""
    P = unflat(F)
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
            if x == 0 and depth[i] == 1 and rows[stack[0]]:
                # a child of the root, whose state has its row: on to the next child whose byte
                # the row does not kill (root_child; a dead child's node is never read)
                ps = stack[0]
                b = byte[i]
                while b < 256 and (trans[ps, b] == 0 or root_child[b] < 0):
                    b += 1
                if b == 256:
                    break
                i = root_child[b]
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
            if s < 0 and (not rows[ps] or trans[ps, byte[i]] < 0):
                # a counter state nearer its bound than the tokens below go (trie_walks.resume):
                # this byte's successor only, in a row filled in part; in such a row, a byte
                # not past the room takes the whole row
                if cnt[3] <= 0 or cnt[2] + 3 > rows.shape[0]:
                    return j, i
                cnt[3] -= 1
                if room[ps] == 0 or r < room[ps]:
                    if not _row_inline(ps, trans, rows, acc, made, P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel,
                                       seen, sts, cuts, has_need):
                        return j, i
                else:
                    n0 = cnt[2]
                    t = _step_byte(ps, byte[i], P, stk, sh, cnt, pool, sinfo, hh, buf, ws, rel, seen, has_need)
                    if t < 0:
                        return j, i
                    for sid in range(n0, cnt[2]):
                        acc[sid] = sinfo[sid, 2] != 0
                    if not rows[ps]:
                        trans[ps, :] = -1
                        rows[ps] = True
                    trans[ps, byte[i]] = t
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
            stop_i = end[i]
            if (s == ps and stop_i - i > LOOP_MIN and not (record and acc[s])  # s == ps: its row was read
                    and (lim < 0 or r <= lim) and loops_over(s, below[i, 0], below[i, 1], trans, short, lim >= 0)):
                # below i the walk stays at s: all of i's subtree is allowed, its tokens
                # one run of tok_ids (tried at subtrees of more than LOOP_MIN nodes: a
                # smaller one is walked about as fast as it is tried)
                for k in range(tok_start[i], tok_start[stop_i]):
                    t = tok_ids[k]
                    words[t >> 5] |= one << np.uint32(t & 31)
                i = stop_i
                continue
            stack[depth[i]] = s
            for k in range(tok_start[i], tok_start[i + 1]):
                t = tok_ids[k]
                words[t >> 5] |= one << np.uint32(t & 31)
            i += 1
        j += 1
        i = -1
    return j, i


@njit(cache=True, nogil=True)
def loops_over(s, lo, hi, trans, short, canon):
    """Whether every byte of the set (lo, hi) (token_trie.byte_bits: a trie node's
    subtree_bytes) leads from state s back to s in the walk: trans[s, b] == s, or with
    canon (a grammar with counters, at nodes with at most walk_lim bytes left, where the
    walk keeps short[] forms) short[trans[s, b]] == s (a counter deep in its range: one
    canonical state for every count; a form not mapped yet, 0, counts as no). Then every
    path below the node stays at s, alive. Bit 0 (NUL, DEL and every byte >= 0x80) never
    loops; the others are tried lowest first, the first that leaves s ending it."""
    one = np.uint64(1)
    if lo & one:
        return False
    for w in range(2):
        x = lo if w == 0 else hi
        while x:
            t = trans[s, 64 * w + trailing_zeros(x)]
            if t != s and not (canon and t > 0 and short[t] == s):
                return False
            x &= x - one
    return True


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


@njit(cache=True, nogil=True)
def state_wide(s, pool, sinfo, F, lasting):
    """Whether the NFA nodes of state s's configurations take "a" and a space or a digit
    "0" (masks.TokenMasks._wide, core_rows.Core.wide), read off their edges in the packed
    NFA F; or take "a" and "A" and all lie below node `lasting` (the closed layout of
    lasting rules: their abstract masks are shared by every grammar, lexeme_masks.py; 0:
    none)."""
    P = unflat(F)
    e_off, e_lo, e_hi = P[0], P[1], P[2]
    o = sinfo[s, 0]
    f = 0
    inside = True
    for i in range(sinfo[s, 1]):
        n = pool[o + i] >> 32
        if n >= lasting:
            inside = False
        for e in range(e_off[n], e_off[n + 1]):
            lo = e_lo[e]
            hi = e_hi[e]
            if lo <= 0x61 <= hi:
                f |= 1
            if lo <= 0x20 <= hi or lo <= 0x30 <= hi:
                f |= 2
            if lo <= 0x41 <= hi:
                f |= 4
        if f & 3 == 3:
            return True
    return inside and f == 5


@njit(cache=True, nogil=True)
def state_depth(s, pool, sinfo, stk):
    """The deepest stack among state s's configurations (compiled.CompiledGrammar.limit_check)."""
    o = sinfo[s, 0]
    d = 0
    for i in range(sinfo[s, 1]):
        x = stk[np.int32(pool[o + i] & 0xFFFFFFFF), 3]
        if x > d:
            d = x
    return d


@njit(cache=True, nogil=True)
def state_base(s, pool, sinfo, stk, items):
    """automaton._base of state s's configurations: the longest stack that every
    configuration's stack extends (stacks.Stacks.base_of), then below each frame of a
    counter or length region that is no item counter (items[node]: nfa.item_counters,
    up to the last of them)."""
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    if m == 0:
        return 0
    base = np.int32(pool[o] & 0xFFFFFFFF)
    for i in range(1, m):
        if base == 0:
            break
        y = np.int32(pool[o + i] & 0xFFFFFFFF)
        if y == base:
            continue
        x = base
        while stk[x, 3] > stk[y, 3]:
            x = stk[x, 1]
        while stk[y, 3] > stk[x, 3]:
            y = stk[y, 1]
        while x != y:
            x = stk[x, 1]
            y = stk[y, 1]
        base = x
    while base and stk[base, 2] != 0:
        ret = stk[base, 0]
        if 0 <= ret < items.shape[0] and items[ret]:
            break
        base = stk[base, 1]
    return base


@njit(cache=True, nogil=True)
def rebase_state(s, frm, to, stk, sh, cnt, pool, sinfo, hh, buf):
    """The id of the state (not accepting) of state s's configurations with the stack frm,
    which every one of their stacks extends, replaced by the stack to: the frames above
    frm pushed again on to, bottom first (stacks.Stacks.rebased, then automaton.intern);
    LIMIT or ROOM as push and intern return them."""
    o = sinfo[s, 0]
    m = sinfo[s, 1]
    if m > buf.shape[0]:
        return LIMIT
    base_depth = stk[frm, 3]
    for i in range(m):
        key = pool[o + i]
        st = np.int32(key & 0xFFFFFFFF)
        x = np.int32(to)
        for up in range(stk[st, 3] - base_depth - 1, -1, -1):  # the frame `up` levels below st, bottom first
            y = st
            for _ in range(up):
                y = stk[y, 1]
            x = push(stk[y, 0], x, stk[y, 2], stk, sh, cnt)
            if x < 0:
                return x
        buf[i] = ((key >> 32) << 32) | np.int64(x)
    m = _sort_dedup(buf, m)
    return intern(buf, m, False, pool, sinfo, hh, cnt)


@njit(cache=True, nogil=True)
def state_in_layout(s, size, cut, pool, sinfo, stk):
    """Whether every configuration of state s sits on a node of the NFA's layout of
    lasting rules (nodes below size) under frames that return into it, down to the
    context frame cut (lexeme_masks.lexeme_key gives such a state a key, and no
    other: most abstract states are not lexemes)."""
    o = sinfo[s, 0]
    for i in range(sinfo[s, 1]):
        key = pool[o + i]
        if (key >> 32) >= size:
            return False
        st = np.int32(key & 0xFFFFFFFF)
        while st != cut:
            ret = stk[st, 0]
            st = stk[st, 1]
            if ret < 0 or ret >= size or st <= 0:
                return False
    return True
