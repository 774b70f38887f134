"""The trie walk of a token mask, compiled with numba when it is installed.

get_walk() -> walk_range or None (numba missing, or FURCA_NO_NUMBA=1: the caller then
uses the numpy level-by-level walk); get_walk_range() -> (walk_range, walk_roots) or None.
kernel(name) -> a helper kernel warmed with them (sparse_words, clear_bits) or None. numba
is imported on the first call, not at import. The kernels: _walk_kernels.py.

walk_range(i, stop, stack, depth, byte, end, trans, rows, tok_start, tok_ids, words, acc, rec,
           rest, lim, short, room, full, keep) -> int
    Visits trie nodes i .. stop-1 in DFS order (the whole trie: stop = len(depth); a
    subtree: stop = end[root]): the state of node i is trans[state of its parent,
    byte[i]]; a dead node (0) skips its subtree; a live node sets the bits (in the uint32
    words) of the tokens that end there. Cost: proportional to the live nodes (plus the
    root's children), so a restrictive state's mask costs microseconds.
    The states of the current path are kept by depth: stack[depth[i]] (depth: the trie's
    dfs_depth; stack[0] is the walk's state). In DFS order a node's parent is the last
    node met one level up, so stack[depth[i] - 1] is its state: a walk's working array
    is max_depth + 1 ints, not one per trie node (1.1 MB a walk for Llama-3.1).
    At a parent state without a transition row (rows[ps], the automaton's ``expanded``
    flags, false) the walk stops and returns i (the caller expands it and resumes from
    i); returns stop when done.
    Canonical states inside the walk: at a node with rest[i] <= lim (no token below has
    more than lim bytes left), the node's state is short[s] (the automaton's
    canonical_short of s, shared by the walks of every count); at a node with
    rest[i] <= room[s] (more bytes left, but no more than s's counters and length frames
    have room for), it is full[s] (automaton.full_canonical: those frames at their
    canonical counts), so a long token is walked through one count's states. short[s] ==
    0 (s not yet mapped) stops the walk at i (the caller maps s and resumes). lim = -1:
    off (a grammar without counters or length regions).
    keep[i] false skips node i's subtree unvisited: every token below it is in a slice
    the caller set whole (token_slices.TokenSlice without rest tries, over the whole trie;
    the trie's keep_all otherwise).
    When rec has room (len(rec) > 1) it records in rec[1 : 1 + rec[0]] the live nodes
    whose state is accepting (acc[state]): for an abstract state (contexts.ContextSplit.context)
    those are the nodes where the rule returns to its caller; it returns i early also
    when rec is full (the caller grows it and resumes). A skipped subtree records nothing:
    its tokens are allowed whatever follows the rule's return. A 1-long rec records
    nothing (acc is then never read).
walk_roots(j, i, roots, start, stack, ..., words, acc, rec, rest, lim, short, room, full, keep) -> (j, i)
    The subtrees below the nodes roots[j:] walked from state `start` (an abstract
    state's continuation below the nodes where its rule returned), recording as
    walk_range does; returns where the caller must expand, map or grow rec.
"""

from __future__ import annotations

import os
import threading

import numpy as np

_LOCK = threading.Lock()
_WALK: list = []  # [(walk_range, walk_roots) or None] once resolved


def get_walk():
    k = get_walk_range()
    return None if k is None else k[0]


def get_walk_range():
    if not _WALK:
        with _LOCK:
            if not _WALK:
                _WALK.append(_build())
    return _WALK[0]


def kernel(name: str):
    """The helper kernel `name` of _walk_kernels, warmed with the walks (sparse_words:
    stored_masks._stored's choice in one pass; clear_bits: bitmask.clear_ids), or None
    without numba."""
    get_walk_range()
    return _KERNELS.get(name)


_KERNELS: dict = {}  # name -> helper kernel, once the walks are built with numba


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        from ._walk_kernels import clear_bits, sparse_words, walk_range, walk_roots
    except ImportError:  # numba is optional
        return None

    _warm(walk_range, walk_roots)
    z = np.zeros(4, np.int32)
    r = z.copy()
    r.setflags(write=False)  # stored masks are read-only: numba types them apart
    for packed, base in ((z, z), (z, r), (r, z), (r, r)):
        sparse_words(packed, base, True, np.zeros(2, np.intp))
    clear_bits(np.zeros(1, np.uint32), np.zeros(1, np.int32))
    _KERNELS.update(sparse_words=sparse_words, clear_bits=clear_bits)
    return walk_range, walk_roots


def _warm(walk_range, walk_roots):
    """Loads (or compiles) every kernel for the argument types the walks pass, on a
    two-node trie and a one-state automaton: the first real mask then pays nothing."""
    z = np.zeros(2, dtype=np.int32)
    d = np.arange(2, dtype=np.int32)  # the depths of a root and its child
    trans = np.zeros((2, 256), np.int32)
    rows = np.ones(2, bool)
    keep = np.ones(2, dtype=np.bool_)
    walk_range(1, 2, z, d, z, z + 2, trans, rows, np.zeros(3, np.int32), z, np.zeros(1, np.uint32),
               np.zeros(2, bool), np.zeros(1, np.int32), z, -1, z, z, z, keep)
    walk_roots(0, -1, np.zeros(1, np.int32), 0, z, d, z, z + 2, trans, rows, np.zeros(3, np.int32), z,
               np.zeros(1, np.uint32), np.zeros(2, bool), np.zeros(1, np.int32), z, -1, z, z, z, keep)
