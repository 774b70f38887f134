"""The trie walk of a token mask, compiled with numba when it is installed.

get_walk() -> walk or None (numba missing, or FURCA_NO_NUMBA=1: the caller then uses
the numpy level-by-level walk). numba is imported on the first call, not at import.

walk(i, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, rest, lim, short, room, full) -> int
    Visits trie nodes i, i+1, ... in DFS order: the state of node i is trans[state of its
    parent, byte[i]]; a dead node (0) skips its subtree; a live node sets the bits (in the
    uint32 words) of the tokens that end there. Cost: proportional to the live nodes
    (plus the root's children), so a restrictive state's mask costs microseconds.
    The states of the current path are kept by depth: stack[depth[i]] (depth: the trie's
    dfs_depth; stack[0] is the walk's state). In DFS order a node's parent is the last
    node met one level up, so stack[depth[i] - 1] is its state: a walk's working array
    is max_depth + 1 ints, not one per trie node (1.1 MB a walk for Llama-3.1).
    At a parent state without a transition row (rows[ps], the automaton's ``expanded``
    flags, false) the walk stops and returns i (the caller expands it and resumes from
    i); returns len(depth) when done.
    Canonical states inside the walk: at a node with rest[i] <= lim (no token below has
    more than lim bytes left), the node's state is short[s] (the automaton's
    canonical_short of s, shared by the walks of every count); at a node with
    rest[i] <= room[s] (more bytes left, but no more than s's counters and length frames
    have room for), it is full[s] (automaton.full_canonical: those frames at their
    canonical counts), so a long token is walked through one count's states. short[s] ==
    0 (s not yet mapped) stops the walk at i (the caller maps s and resumes). lim = -1:
    off (a grammar without counters or length regions).

get_walk_range() -> walk_range or None:
walk_range(i, stop, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, acc, rec,
           rest, lim, short, room, full) -> int
    The same walk over nodes i .. stop-1 (a subtree: stop = end[root]), and, when
    rec has room (len(rec) > 1), records in rec[1 : 1 + rec[0]] the live nodes whose
    state is accepting (acc[state]): for an abstract state (masks.TokenMasks._context) those
    are the nodes where the rule returns to its caller. Returns i early also when rec
    is full (the caller grows it and resumes).
walk_roots(j, i, roots, start, stack, ..., words, acc, rec, rest, lim, short, room, full) -> (j, i)
    The subtrees below the nodes roots[j:] walked from state `start` (an abstract
    state's continuation below the nodes where its rule returned), recording as
    walk_range does; returns where the caller must expand, map or grow rec.
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


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None, None
    try:
        from numba import njit
    except ImportError:  # numba is optional
        return None, None

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
    def walk(i, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, rest, lim, short, room, full):
        n = depth.shape[0]
        one = np.uint32(1)
        while i < n:
            s = node_state(stack[depth[i] - 1], byte[i], rest[i], trans, rows, lim, short, room, full)
            if s < 0:
                return i
            if s == 0:
                i = end[i]
            else:
                stack[depth[i]] = s
                for k in range(tok_start[i], tok_start[i + 1]):
                    t = tok_ids[k]
                    words[t >> 5] |= one << np.uint32(t & 31)
                i += 1
        return n

    @njit(cache=True, nogil=True)
    def walk_range(i, stop, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, acc, rec,
                   rest, lim, short, room, full):
        one = np.uint32(1)
        cap = rec.shape[0]
        record = cap > 1
        while i < stop:
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
                   acc, rec, rest, lim, short, room, full):
        """For each root x in roots[j:]: the subtree below x walked from state `start`
        (x's own tokens excluded), recording accepting nodes in rec as walk_range does
        when len(rec) > 1. Returns (j, i) to resume after expanding the parent state of
        node i (or growing rec); j == len(roots) when done. Start with i = -1."""
        one = np.uint32(1)
        nr = roots.shape[0]
        cap = rec.shape[0]
        record = cap > 1
        while j < nr:
            x = roots[j]
            stop = end[x]
            if i <= x:
                stack[depth[x]] = start
                i = x + 1
            while i < stop:
                s = node_state(stack[depth[i] - 1], byte[i], rest[i], trans, rows, lim, short, room, full)
                if s < 0:
                    return j, i
                if s == 0:
                    i = end[i]
                else:
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

    _warm(walk, walk_range, walk_roots)
    return walk, (walk_range, walk_roots)


def _warm(walk, walk_range, walk_roots):
    """Loads (or compiles) every kernel for the argument types the walks pass, on a
    two-node trie and a one-state automaton: the first real mask then pays nothing."""
    z = np.zeros(2, dtype=np.int32)
    d = np.arange(2, dtype=np.int32)  # the depths of a root and its child
    trans = np.zeros((2, 256), np.int32)
    rows = np.ones(2, bool)
    walk(1, z, d, z, z + 2, trans, rows, np.zeros(3, np.int32), z, np.zeros(1, np.uint32), z, -1, z, z, z)
    walk_range(1, 2, z, d, z, z + 2, trans, rows, np.zeros(3, np.int32), z, np.zeros(1, np.uint32),
               np.zeros(2, bool), np.zeros(1, np.int32), z, -1, z, z, z)
    walk_roots(0, -1, np.zeros(1, np.int32), 0, z, d, z, z + 2, trans, rows, np.zeros(3, np.int32), z,
               np.zeros(1, np.uint32), np.zeros(2, bool), np.zeros(1, np.int32), z, -1, z, z, z)
