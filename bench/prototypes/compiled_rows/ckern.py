"""Prototype: compiled expansion of push-only automaton states (H4, not part of furca).

Tables (all numpy, int32 unless noted):
  NFA side (per node, learned from Closures.template / relative):
    cls_start[n]..cls_start[n+1]: n's byte classes (cls_lo, cls_hi exclusive, tg_start..tg_start+1 into tg)
    learned[n]: 1 template stored, 0 not
    rel_ok[t]: 1 relative closure push-only and stored, 0 not (fallback)
    rel_start[t]..rel_start[t+1]: entries (rel_node, fr_start..fr_start+1 into fr_ret/fr_k), frames bottom first
    tick[n]: bool, node starts a length-region character (fallback)
  Stacks: st_ret, st_par, st_k, st_depth; open-addressing table sh (stack ids, -1 empty)
  States: s_off, s_len into pool (int64 keys node << 32 | stack, sorted), s_acc;
          table hh (state ids, -1 empty); trans[s, 256]; expanded[s]
  ctr (int64): [0] stacks, [1] pool used, [2] states
"""

import numpy as np
from numba import njit

MAXDEPTH = 512


@njit(cache=True, inline="always")
def _mix(h):
    h ^= h >> 31
    h *= 0x5851F42D4C957F2D
    h ^= h >> 29
    return h


@njit(cache=True)
def push(ret, par, k, st_ret, st_par, st_k, st_depth, sh, ctr):
    mask = sh.shape[0] - 1
    h = _mix((np.int64(ret) * 1000003 + np.int64(par)) * 31 + k) & mask
    while True:
        x = sh[h]
        if x < 0:
            break
        if st_ret[x] == ret and st_par[x] == par and st_k[x] == k:
            return x
        h = (h + 1) & mask
    sid = ctr[0]
    d = st_depth[par] + 1
    if d > MAXDEPTH or sid >= st_ret.shape[0]:
        return -1
    st_ret[sid] = ret
    st_par[sid] = par
    st_k[sid] = k
    st_depth[sid] = d
    sh[h] = sid
    ctr[0] = sid + 1
    return sid


@njit(cache=True)
def _state_hash(keys, m, acc):
    h = np.int64(acc) + 7
    for i in range(m):
        h = _mix(h * 1000003 + keys[i])
    return h


@njit(cache=True)
def intern(keys, m, acc, pool, s_off, s_len, s_acc, hh, ctr, trans, expanded):
    """keys[:m] sorted, deduplicated config keys. Returns the state id (-1: no room)."""
    if m == 0 and not acc:
        return 0
    mask = hh.shape[0] - 1
    h = _state_hash(keys, m, acc) & mask
    while True:
        x = hh[h]
        if x < 0:
            break
        if s_len[x] == m and s_acc[x] == acc:
            o = s_off[x]
            same = True
            for i in range(m):
                if pool[o + i] != keys[i]:
                    same = False
                    break
            if same:
                return x
        h = (h + 1) & mask
    sid = ctr[2]
    o = ctr[1]
    if sid >= s_off.shape[0] or o + m > pool.shape[0]:
        return -1
    for i in range(m):
        pool[o + i] = keys[i]
    s_off[sid] = o
    s_len[sid] = m
    s_acc[sid] = acc
    trans[sid, :] = 0
    expanded[sid] = False
    hh[h] = sid
    ctr[1] = o + m
    ctr[2] = sid + 1
    return sid


@njit(cache=True)
def _sort_dedup(buf, m):
    if m > 1:
        if m <= 16:  # insertion sort
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


@njit(cache=True)
def expand(s, cls_start, cls_lo, cls_hi, tg_start, tg, learned, tick, rel_ok, rel_start, rel_node, fr_start,
           fr_ret, fr_k, st_ret, st_par, st_k, st_depth, sh, pool, s_off, s_len, s_acc, hh, ctr, trans, expanded,
           cuts, buf):
    """Writes trans[s] for a push-only state; 0 done, -1 fallback (nothing written but maybe states/stacks)."""
    if expanded[s]:
        return 0
    off = s_off[s]
    m = s_len[s]
    for i in range(m):
        n = pool[off + i] >> 32
        if tick[n] or not learned[n]:
            return -1
        for c in range(cls_start[n], cls_start[n + 1]):
            for j in range(tg_start[c], tg_start[c + 1]):
                if rel_ok[tg[j]] != 1:
                    return -1
    cuts[:] = False
    cuts[256] = True
    for i in range(m):
        n = pool[off + i] >> 32
        for c in range(cls_start[n], cls_start[n + 1]):
            cuts[cls_lo[c]] = True
            cuts[cls_hi[c]] = True
    row = trans[s]
    row[:] = 0
    lo = 0
    while lo < 256:
        hi = lo + 1
        while not cuts[hi]:
            hi += 1
        nb = 0
        for i in range(m):
            key = pool[off + i]
            n = key >> 32
            st = np.int32(key & 0xFFFFFFFF)
            for c in range(cls_start[n], cls_start[n + 1]):
                if cls_lo[c] <= lo and lo < cls_hi[c]:
                    for j in range(tg_start[c], tg_start[c + 1]):
                        t = tg[j]
                        for e in range(rel_start[t], rel_start[t + 1]):
                            x = st
                            for f in range(fr_start[e], fr_start[e + 1]):
                                x = push(fr_ret[f], x, fr_k[f], st_ret, st_par, st_k, st_depth, sh, ctr)
                                if x < 0:
                                    return -1
                            if nb >= buf.shape[0]:
                                return -1
                            buf[nb] = (np.int64(rel_node[e]) << 32) | x
                            nb += 1
                    break
        if nb:
            nb = _sort_dedup(buf, nb)
            sid = intern(buf, nb, False, pool, s_off, s_len, s_acc, hh, ctr, trans, expanded)
            if sid < 0:
                return -1
            row[lo:hi] = sid
        lo = hi
    expanded[s] = True
    return 0


@njit(cache=True)
def expand_many(states, res, cls_start, cls_lo, cls_hi, tg_start, tg, learned, tick, rel_ok, rel_start, rel_node,
                fr_start, fr_ret, fr_k, st_ret, st_par, st_k, st_depth, sh, pool, s_off, s_len, s_acc, hh, ctr,
                trans, expanded, cuts, buf):
    for i in range(states.shape[0]):
        res[i] = expand(states[i], cls_start, cls_lo, cls_hi, tg_start, tg, learned, tick, rel_ok, rel_start,
                        rel_node, fr_start, fr_ret, fr_k, st_ret, st_par, st_k, st_depth, sh, pool, s_off, s_len,
                        s_acc, hh, ctr, trans, expanded, cuts, buf)


@njit(cache=True)
def bulk_stacks(n, st_ret, st_par, st_k, st_depth, sh, ctr):
    """Inserts stacks 1..n-1 (already in the arrays) into the table."""
    mask = sh.shape[0] - 1
    for sid in range(1, n):
        ret, par, k = st_ret[sid], st_par[sid], st_k[sid]
        h = _mix((np.int64(ret) * 1000003 + np.int64(par)) * 31 + k) & mask
        while sh[h] >= 0:
            h = (h + 1) & mask
        sh[h] = sid
    ctr[0] = n


@njit(cache=True)
def bulk_states(n, pool, s_off, s_len, s_acc, hh, ctr):
    mask = hh.shape[0] - 1
    for sid in range(1, n):
        h = _state_hash(pool[s_off[sid]:], s_len[sid], s_acc[sid]) & mask
        while hh[h] >= 0:
            h = (h + 1) & mask
        hh[h] = sid
    ctr[2] = n


def pow2(x):
    p = 1
    while p < x:
        p *= 2
    return p


class Tables:
    """A numpy copy of a LazyAutomaton's stacks and states, plus the NFA tables of `nodes`."""

    def __init__(self, a, nodes, state_room=1 << 16, stack_room=1 << 16):
        nfa, cl = a.nfa, a.closures
        nn = len(nfa.edges)
        # NFA: templates of nodes, relative closures of their targets
        self.learned = np.zeros(nn, np.bool_)
        self.tick = np.zeros(nn, np.bool_)
        for t in nfa.tick:
            self.tick[t] = True
        self.rel_ok = np.zeros(nn, np.int8)
        cls_start = np.zeros(nn + 1, np.int32)
        lo_l, hi_l, tgs_l, tg_l = [], [], [0], []
        per = {}
        targets = set()
        for n in nodes:
            per[n] = a.template(n)
            for _lo, _hi, tgs in per[n]:
                targets.update(tgs)
        # classes laid out in node order
        for n in range(nn):
            cls_start[n] = len(lo_l)
            tm = per.get(n)
            if tm is None:
                continue
            self.learned[n] = True
            for lo, hi, tgs in tm:
                lo_l.append(lo)
                hi_l.append(hi)
                tg_l.extend(tgs)
                tgs_l.append(len(tg_l))
        cls_start[nn] = len(lo_l)
        self.cls_start = cls_start
        self.cls_lo = np.array(lo_l + [0], np.int32)
        self.cls_hi = np.array(hi_l + [0], np.int32)
        self.tg_start = np.array(tgs_l, np.int32)
        self.tg = np.array(tg_l + [0], np.int32)
        rel_start = np.zeros(nn + 1, np.int32)
        rn, fs, fr, fk = [], [0], [], []
        for t in range(nn):
            rel_start[t] = len(rn)
            if t not in targets:
                continue
            rel_out, returns = cl.relative(t)
            if returns or any(u in nfa.need for u, _f in rel_out):
                continue
            self.rel_ok[t] = 1
            for u, frames in rel_out:
                rn.append(u)
                for ret, k in frames:
                    fr.append(ret)
                    fk.append(k)
                fs.append(len(fr))
        rel_start[nn] = len(rn)
        self.rel_start, self.rel_node = rel_start, np.array(rn + [0], np.int32)
        self.fr_start = np.array(fs, np.int32)
        self.fr_ret = np.array(fr + [0], np.int32)
        self.fr_k = np.array(fk + [0], np.int32)
        # stacks
        frames = a.stacks.frames
        ns = len(frames)
        cap = ns + stack_room
        self.st_ret = np.zeros(cap, np.int32)
        self.st_par = np.zeros(cap, np.int32)
        self.st_k = np.zeros(cap, np.int32)
        self.st_depth = np.zeros(cap, np.int32)
        arr = np.array(frames, np.int64)
        self.st_ret[:ns], self.st_par[:ns], self.st_k[:ns] = arr[:, 0], arr[:, 1], arr[:, 2]
        self.st_depth[:ns] = a.stacks.depth
        self.sh = np.full(pow2(2 * cap), -1, np.int32)
        self.ctr = np.zeros(4, np.int64)
        bulk_stacks(ns, self.st_ret, self.st_par, self.st_k, self.st_depth, self.sh, self.ctr)
        # states
        nst = len(a.configs)
        scap = nst + state_room
        self.s_off = np.zeros(scap, np.int32)
        self.s_len = np.zeros(scap, np.int32)
        self.s_acc = np.zeros(scap, np.bool_)
        keys = []
        for sid, cf in enumerate(a.configs):
            self.s_off[sid] = len(keys)
            self.s_len[sid] = len(cf)
            self.s_acc[sid] = a.accepting[sid]
            keys.extend((n << 32) | st for n, st in cf)
        self.pool = np.zeros(len(keys) + 64 * state_room, np.int64)
        self.pool[: len(keys)] = keys
        self.ctr[1] = len(keys)
        self.hh = np.full(pow2(2 * scap), -1, np.int32)
        bulk_states(nst, self.pool, self.s_off, self.s_len, self.s_acc, self.hh, self.ctr)
        self.trans = np.zeros((scap, 256), np.int32)
        self.expanded = np.zeros(scap, np.bool_)
        self.expanded[:nst] = a.expanded[:nst]
        self.cuts = np.zeros(257, np.bool_)
        self.buf = np.zeros(8192, np.int64)

    def args(self):
        return (self.cls_start, self.cls_lo, self.cls_hi, self.tg_start, self.tg, self.learned, self.tick,
                self.rel_ok, self.rel_start, self.rel_node, self.fr_start, self.fr_ret, self.fr_k, self.st_ret,
                self.st_par, self.st_k, self.st_depth, self.sh, self.pool, self.s_off, self.s_len, self.s_acc,
                self.hh, self.ctr, self.trans, self.expanded, self.cuts, self.buf)

    def chain(self, st):
        out = []
        while st:
            out.append((int(self.st_ret[st]), int(self.st_k[st])))
            st = int(self.st_par[st])
        return tuple(out)

    def configs(self, sid):
        o, m = int(self.s_off[sid]), int(self.s_len[sid])
        return [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in self.pool[o:o + m]]

    def materialize(self, lo, hi):
        """Python tuples of states lo..hi-1 (the cost of a sync back to LazyAutomaton.configs)."""
        pool, so, sl = self.pool, self.s_off, self.s_len
        out = []
        for sid in range(lo, hi):
            o = int(so[sid])
            ks = pool[o:o + int(sl[sid])].tolist()
            out.append(tuple([(k >> 32, k & 0xFFFFFFFF) for k in ks]))
        return out
