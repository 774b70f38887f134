"""The trie walk of a token mask, compiled with numba when it is installed.

get_walk() -> walk or None (numba missing, or FURCA_NO_NUMBA=1: the caller then uses
the numpy level-by-level walk). numba is imported on the first call, not at import.

walk(i, node_state, parent, byte, end, trans, expanded, tok_start, tok_ids, words) -> int
    Visits trie nodes i, i+1, ... in DFS order: node_state[i] = trans[node_state[parent[i]],
    byte[i]]; a dead node (0) skips its subtree; a live node sets the bits (in the
    uint32 words) of the tokens that end there. Cost: proportional to the live nodes
    (plus the root's children), so a restrictive state's mask costs microseconds.
    Stops and returns i at the first node whose parent state has no transition row yet
    (the caller expands it and resumes from i); returns len(parent) when done.
"""

from __future__ import annotations

import os
import threading

import numpy as np

_LOCK = threading.Lock()
_WALK: list = []  # [walk or None] once resolved


def get_walk():
    if _WALK:
        return _WALK[0]
    with _LOCK:
        if not _WALK:
            _WALK.append(_build())
    return _WALK[0]


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        from numba import njit
    except ImportError:  # numba is optional
        return None

    @njit(cache=True, nogil=True)
    def walk(i, node_state, parent, byte, end, trans, expanded, tok_start, tok_ids, words):
        n = parent.shape[0]
        one = np.uint32(1)
        while i < n:
            ps = node_state[parent[i]]
            if not expanded[ps]:
                return i
            s = trans[ps, byte[i]]
            node_state[i] = s
            if s == 0:
                i = end[i]
            else:
                for k in range(tok_start[i], tok_start[i + 1]):
                    t = tok_ids[k]
                    words[t >> 5] |= one << np.uint32(t & 31)
                i += 1
        return n

    return walk
