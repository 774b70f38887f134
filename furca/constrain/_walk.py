"""The trie walk of a token mask, compiled with numba when it is installed.

get_walk() -> walk or None (numba missing, or FURCA_NO_NUMBA=1: the caller then uses
the numpy level-by-level walk). numba is imported on the first call, not at import.

walk(i, node_state, parent, byte, end, trans, fx, tok_start, tok_ids, words, rest, lim, short) -> int
    Visits trie nodes i, i+1, ... in DFS order: node_state[i] = trans[node_state[parent[i]],
    byte[i]]; a dead node (0) skips its subtree; a live node sets the bits (in the
    uint32 words) of the tokens that end there. Cost: proportional to the live nodes
    (plus the root's children), so a restrictive state's mask costs microseconds.
    A parent state without a transition row (fx[0], ``rowdone``, false) is expanded in
    place when it is one configuration on a plain node (expand_plain, the tables of
    plain_rows.PlainRows: fx is its ``fx()``); otherwise the walk stops and returns i
    (the caller syncs the new states, expands it and resumes from i); returns
    len(parent) when done.
    Canonical states inside the walk: at a node with rest[i] <= lim (no token below has
    more than lim bytes left), the node's state is short[s] (the automaton's
    canonical_short of s, shared by the walks of every count); short[s] < 0 (not yet
    mapped) also stops the walk at i (the caller maps s and resumes). lim = -1: off.

get_walk_range() -> walk_range or None:
walk_range(i, stop, node_state, parent, byte, end, trans, fx, tok_start, tok_ids, words, acc, rec,
           rest, lim, short) -> int
    The same walk over nodes i .. stop-1 (a subtree: stop = end[root]), and, when
    rec has room (len(rec) > 1), records in rec[1 : 1 + rec[0]] the live nodes whose
    state is accepting (acc[state]): for an abstract state (masks.TokenMasks._context) those
    are the nodes where the rule returns to its caller. Returns i early also when rec
    is full (the caller grows it and resumes).
"""

from __future__ import annotations

import os
import threading

import numpy as np

_LOCK = threading.Lock()
_WALK: list = []  # [walk or None] once resolved


def get_walk():
    if _WALK:
        return _WALK[0][0]
    with _LOCK:
        if not _WALK:
            _WALK.append(_build())
    return _WALK[0][0]


def get_walk_range():
    get_walk()
    return _WALK[0][1]


def get_plain_kernels():
    """(table_insert(keys, vals, new_keys, new_vals), expand_plain(ps, trans, fx)): the
    kernels' hash-table insert and single-state expansion (plain_rows.py), or None
    without numba."""
    get_walk()
    return _WALK[0][2]


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None, None, None
    try:
        from numba import njit, types
        from numba.extending import overload
    except ImportError:  # numba is optional
        return None, None, None

    @njit(cache=True, nogil=True)
    def table_slot(keys, key):
        """The slot of key in the open-addressing table keys (-1: empty), or the empty slot
        where it goes (plain_rows.PlainRows)."""
        mask = keys.shape[0] - 1
        x = np.uint64(key)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0x9E3779B97F4A7C15)
        x ^= x >> np.uint64(29)
        h = np.int64(x & np.uint64(mask))
        while True:
            k = keys[h]
            if k == key or k == -1:
                return h
            h = (h + 1) & mask

    @njit(cache=True, nogil=True)
    def table_insert(keys, vals, new_keys, new_vals):
        """Inserts new_keys[j] -> new_vals[j] (keys not in the table yet; -1 skipped)."""
        for j in range(new_keys.shape[0]):
            if new_keys[j] >= 0:
                h = table_slot(keys, new_keys[j])
                keys[h] = new_keys[j]
                vals[h] = new_vals[j]

    @njit(cache=True, nogil=True)
    def expand_plain(ps, trans, fx):
        """State ps's row when it is one configuration on a learned plain node (see
        plain_rows.py): each span's target with ps's stack, looked up in the table or
        interned (the next id; its configuration noted for PlainRows.sync). False,
        nothing written, when it is not, or without room for its new states or log."""
        rowdone, cfg_node, cfg_stack, node_span, span_lo, span_hi, span_tgt, keys, vals, ctr, log = fx
        n = cfg_node[ps] - 1
        if n < 0:
            return False
        first = node_span[n, 0] - 1  # -1: not learned, -2: not plain
        stop = node_span[n, 1]
        if first < 0 or ctr[1] < stop - first or ctr[3] >= log.shape[0]:
            return False
        st = np.int64(cfg_stack[ps])
        row = trans[ps]
        row[:] = 0
        for j in range(first, stop):
            t = span_tgt[j]
            sid = 0
            if t >= 0:
                key = (np.int64(t) << 32) | st
                h = table_slot(keys, key)
                if keys[h] == key:
                    sid = vals[h]
                else:
                    sid = ctr[0]
                    ctr[0] += 1
                    ctr[1] -= 1
                    ctr[2] += 1
                    keys[h] = key
                    vals[h] = sid
                    cfg_node[sid] = t + 1
                    cfg_stack[sid] = st
            for b in range(span_lo[j], span_hi[j]):
                row[b] = sid
        rowdone[ps] = True
        log[ctr[3]] = ps
        ctr[3] += 1
        return True

    # fx is the tuple of plain_rows.PlainRows.fx(), or a plain ``expanded`` array (the
    # compiler's warm-up calls, compiler._warm_walk): the kernels read the row flags once
    # (rows_of) and call expand_plain only for a state without a row (passing the tuple
    # per trie node would count references to its 11 arrays at every node)
    def rows_of(fx):
        """The array of "has a row" flags."""

    @overload(rows_of, jit_options={"nogil": True})
    def _rows_of(fx):
        if isinstance(fx, types.Array):
            return lambda fx: fx
        return lambda fx: fx[0]

    def expand_row(ps, trans, fx):
        """expand_plain(ps, trans, fx), False for a plain array."""

    @overload(expand_row, jit_options={"nogil": True})
    def _expand_row(ps, trans, fx):
        if isinstance(fx, types.Array):
            return lambda ps, trans, fx: False
        return lambda ps, trans, fx: expand_plain(ps, trans, fx)

    @njit(cache=True, nogil=True)
    def walk(i, node_state, parent, byte, end, trans, fx, tok_start, tok_ids, words, rest, lim, short):
        n = parent.shape[0]
        one = np.uint32(1)
        ready = rows_of(fx)
        while i < n:
            ps = node_state[parent[i]]
            if not ready[ps] and not expand_row(ps, trans, fx):
                return i
            s = trans[ps, byte[i]]
            if s != 0 and rest[i] <= lim:
                c = short[s]
                if c < 0:
                    return i
                s = c
            node_state[i] = s
            if s == 0:
                i = end[i]
            else:
                for k in range(tok_start[i], tok_start[i + 1]):
                    t = tok_ids[k]
                    words[t >> 5] |= one << np.uint32(t & 31)
                i += 1
        return n

    @njit(cache=True, nogil=True)
    def walk_range(i, stop, node_state, parent, byte, end, trans, fx, tok_start, tok_ids, words, acc, rec,
                   rest, lim, short):
        one = np.uint32(1)
        ready = rows_of(fx)
        cap = rec.shape[0]
        record = cap > 1
        while i < stop:
            ps = node_state[parent[i]]
            if not ready[ps] and not expand_row(ps, trans, fx):
                return i
            s = trans[ps, byte[i]]
            if s == 0:
                i = end[i]
                continue
            if rest[i] <= lim:
                c = short[s]
                if c < 0:
                    return i
                s = c
            if record and acc[s]:
                c = rec[0]
                if c + 1 >= cap:
                    return i
                rec[c + 1] = i
                rec[0] = c + 1
            node_state[i] = s
            for k in range(tok_start[i], tok_start[i + 1]):
                t = tok_ids[k]
                words[t >> 5] |= one << np.uint32(t & 31)
            i += 1
        return stop

    @njit(cache=True, nogil=True)
    def walk_roots(j, i, roots, start, node_state, parent, byte, end, trans, fx, tok_start, tok_ids, words,
                   rest, lim, short):
        """For each root x in roots[j:]: the subtree below x walked from state `start`
        (x's own tokens excluded). Returns (j, i) to resume after expanding the parent
        state of node i; j == len(roots) when done. Start with i = -1."""
        one = np.uint32(1)
        ready = rows_of(fx)
        nr = roots.shape[0]
        while j < nr:
            x = roots[j]
            stop = end[x]
            if i <= x:
                node_state[x] = start
                i = x + 1
            while i < stop:
                ps = node_state[parent[i]]
                if not ready[ps] and not expand_row(ps, trans, fx):
                    return j, i
                s = trans[ps, byte[i]]
                if s != 0 and rest[i] <= lim:
                    c = short[s]
                    if c < 0:
                        return j, i
                    s = c
                node_state[i] = s
                if s == 0:
                    i = end[i]
                else:
                    for k in range(tok_start[i], tok_start[i + 1]):
                        t = tok_ids[k]
                        words[t >> 5] |= one << np.uint32(t & 31)
                    i += 1
            j += 1
            i = -1
        return j, i

    _warm(walk, walk_range, walk_roots, table_insert, expand_plain)
    return walk, (walk_range, walk_roots), (table_insert, expand_plain)


def _warm(walk, walk_range, walk_roots, table_insert, expand_plain):
    """Loads (or compiles) every kernel for the argument types the walks pass, on a
    two-node trie and a one-state automaton: the first real mask then pays nothing."""
    z = np.zeros(2, dtype=np.int32)
    trans = np.zeros((2, 256), np.int32)
    keys, vals = np.full(4, -1, np.int64), np.zeros(4, np.int32)
    fx = (np.ones(2, bool), z.copy(), z.copy(), np.zeros((1, 2), np.int32), z, z, z, keys, vals,
          np.zeros(5, np.int64), z.copy())
    table_insert(keys, vals, np.ones(1, np.int64), np.ones(1, np.int32))
    expand_plain(1, trans, fx)
    walk(1, z, z, z, z + 2, trans, fx, np.zeros(3, np.int32), z, np.zeros(1, np.uint32), z, -1, z)
    walk_range(1, 2, z, z, z, z + 2, trans, fx, np.zeros(3, np.int32), z, np.zeros(1, np.uint32),
               np.zeros(2, bool), np.zeros(1, np.int32), z, -1, z)
    walk_roots(0, -1, np.zeros(1, np.int32), 0, z, z, z, z + 2, trans, fx, np.zeros(3, np.int32), z,
               np.zeros(1, np.uint32), z, -1, z)
