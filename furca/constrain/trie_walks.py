"""The trie-walk drivers of a token mask: which states allow which tokens of a trie.

Each sets, in a mask's uint32 words, the bits of the trie's tokens that a state allows
(masks.TokenMasks calls them under the automaton's lock): walk_compiled (the numba DFS of
_walk.py, resumed in Python wherever it meets a state without a row or one whose canonical
forms are not mapped yet), walk_recording (the same for an abstract state, noting the trie
nodes where its rule returned), walk_continue (the subtrees below those nodes from the
continuation state) and walk_numpy (level by level, without numba). See DESIGN.md
("Masks: computed once per state").
"""

from __future__ import annotations

import numpy as np

from . import _walk
from .bitmask import distinct

REC_START = 257  # a recording walk's first buffer (rec[0] the count), doubled when full
# a walk that records nothing: the kernels never write a 1-long rec (writable all the same:
# a read-only array is another numba type, and the kernel has a writing path)
_NO_REC = np.zeros(1, dtype=np.int32)


def _grown(rec):
    """rec (a full recording buffer) with twice the room, its records kept."""
    out = np.zeros(2 * len(rec) - 1, dtype=np.int32)
    out[: len(rec)] = rec
    return out


def joined(parts) -> np.ndarray:
    """The int arrays parts end to end, int32, a new array: np.concatenate without its
    array-function dispatcher, numpy 2's Python code (a process forked after set-up
    copies its pages at the first call)."""
    x = np.empty(sum(map(len, parts)), np.int32)
    k = 0
    for p in parts:
        x[k : k + len(p)] = p
        k += len(p)
    return x


def merged_roots(parts) -> np.ndarray:
    """The sorted distinct trie nodes of the int arrays parts (walks' records), int32:
    np.unique of their concatenation (joined), by bitmask.distinct."""
    return distinct(joined(parts), fresh=True)


def walk_continue(a, roots, trie, cont, words, record=False):
    """Sets in words the bits of the tokens below the trie nodes roots (where an
    abstract state's rule returned) that the continuation state cont allows. record:
    also returns, as walk_recording does, the nodes below the roots where cont's walk is
    accepting (returned through the context frame: cont continues an abstract state), in
    no particular order."""
    walk_roots = _walk.get_walk_range()[1]
    stack = np.empty(trie.max_depth + 1, dtype=np.int32)
    depth, byte, end = trie.dfs_depth, trie.dfs_byte, trie.dfs_end
    rec = np.zeros(REC_START, dtype=np.int32) if record else _NO_REC
    j, i = 0, -1
    while True:
        if a.core is not None:  # rows made inside the walk (core_rows.py)
            j, i = a.core.walk_roots(a, j, i, roots, cont, stack, trie, words, rec, trie.keep_all)
        else:
            j, i = walk_roots(j, i, roots, cont, stack, depth, byte, end, a.trans, a.walkable, trie.tok_start,
                              trie.tok_ids, words, a.acc, rec, trie.dfs_rest, a.walk_lim, a.short, a.room, a.full,
                              trie.keep_all)
        if j >= len(roots):
            break
        if not resume(a, trie, stack, i) and record:  # rec full
            rec = _grown(rec)
    if not record:
        return None
    return rec[1 : 1 + rec[0]].copy()


def resume(a, trie, stack, i) -> bool:
    """Where a compiled walk stopped at node i: gives its parent's state (the walk's
    stack, by depth: _walk.py) its row, or the successor on node i's byte alone (a
    counter state walked past its room, below), or maps the node's state
    (automaton.map_short: its canonical_short and full_canonical); False when none was
    due."""
    ps = int(stack[trie.dfs_depth[i] - 1])
    b = int(trie.dfs_byte[i])
    if not a.walkable[ps] or a.trans[ps, b] < 0:
        room = int(a.room[ps])
        if room and trie.dfs_rest[i] >= room:
            # a counter state nearer its bound than the tokens below go (past
            # full_canonical's room, the walk meets one state per count along a long
            # token, and reads one byte of each): this byte's successor only, as a byte
            # step. The row is built in full where a walk needs a byte not past the room.
            t = a._step_byte(ps, b)  # may grow the tables
            if not a.walkable[ps]:
                a.trans[ps] = -1
                a.walkable[ps] = True
            a.trans[ps, b] = t
        else:
            a.expand(ps)
        return True
    t = int(a.trans[ps, b])
    if t and a.walk_lim >= 0 and a.short[t] == 0:
        a.map_short(t)
        return True
    return False


def walk_compiled(a, s, trie, words, keep=None):
    """Sets in words the bits of trie's tokens that s allows (numba DFS walk); keep: the
    nodes whose subtrees it visits (a slice level's, token_slices.TokenSlice; default all)."""
    _walk_from(a, s, trie, words, keep, _NO_REC)


def walk_recording(a, s, trie, words, keep=None):
    """walk_compiled for an abstract state; returns the trie nodes (DFS order) where
    its rule returned to the context (accepting states)."""
    rec = _walk_from(a, s, trie, words, keep, np.zeros(REC_START, dtype=np.int32))
    return rec[1 : 1 + rec[0]].copy()


def _walk_from(a, s, trie, words, keep, rec):
    """The compiled walk of the whole trie from s, resumed after each row it needs
    (resume); rec (grown when full) is returned: _NO_REC records nothing."""
    n = trie.num_nodes
    keep = trie.keep_all if keep is None else keep
    stack = np.empty(trie.max_depth + 1, dtype=np.int32)  # the states of the walk's path, by depth
    stack[0] = s
    i = 1 if s != 0 else n
    depth, byte, end = trie.dfs_depth, trie.dfs_byte, trie.dfs_end
    walk_range = _walk.get_walk()
    while i < n:
        if a.core is not None:  # rows made inside the walk (core_rows.py)
            i = a.core.walk_range(a, i, stack, trie, words, rec, keep)
        else:
            i = walk_range(i, n, stack, depth, byte, end, a.trans, a.walkable, trie.tok_start,
                           trie.tok_ids, words, a.acc, rec, trie.dfs_rest, a.walk_lim, a.short, a.room, a.full, keep)
        if i < n and not resume(a, trie, stack, i):  # rec full
            rec = _grown(rec)
    return rec


def walk_numpy(a, s, trie, words):
    """Same as walk_compiled, level by level with numpy gathers (BFS order)."""
    node_state = np.zeros(trie.num_nodes + 1, dtype=np.int32)
    if s != 0 and trie.num_nodes > 1:
        byte, first_child, num_children = trie.byte, trie.first_child, trie.num_children
        cur = np.arange(trie.level_start[1], trie.level_start[2], dtype=np.int32)
        pst = np.full(len(cur), s, dtype=np.int32)
        while True:
            exp = a.expanded
            if not exp[pst].all():
                for u in distinct(pst[~exp[pst]], fresh=True).tolist():
                    a.expand(u)
            st = a.trans.reshape(-1)[pst.astype(np.int64) * 256 + byte[cur]]
            node_state[cur] = st
            keep = st != 0
            par, pst = cur[keep], st[keep]
            counts = num_children[par]
            has = counts > 0
            if not has.all():
                par, pst, counts = par[has], pst[has], counts[has]
            if len(par) == 0:
                break
            ends = np.cumsum(counts)
            total = int(ends[-1])
            cur = (np.repeat(first_child[par] - (ends - counts), counts) + np.arange(total, dtype=np.int32)).astype(np.int32)
            pst = np.repeat(pst, counts)
    allowed = np.zeros(len(words) * 32, dtype=bool)
    allowed[: len(trie.token_node)] = node_state[trie.token_node] != 0
    words |= np.packbits(allowed, bitorder="little").view(np.uint32)
