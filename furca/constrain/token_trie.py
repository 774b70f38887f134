"""TokenTrie: the flat trie of a vocabulary's token byte strings that the masks walk.

Every distinct non-empty token byte string, nodes in breadth-first order so that the
children of a node are contiguous and each depth is a contiguous range, with the DFS
order and per-node token runs the compiled walks read (_walk.py). Built by
tokenizer.TokenizerInfo (the whole vocabulary, its long tokens) and token_slices.TokenSlice
(the rest of a slice's level).
"""

from __future__ import annotations

import numpy as np


class TokenTrie:
    """Flat trie of token byte strings, nodes in BFS order (node 0 = root, depth 0).

    byte[n], parent[n], depth[n]; children of n are first_child[n] : first_child[n] +
    num_children[n]; nodes of depth d are level_start[d] : level_start[d+1].
    token_node[t] is the node where token t's bytes end, or ``num_nodes`` (a sentinel
    slot that walks leave dead) for special / empty / out-of-vocabulary ids.
    The same trie in DFS order (sorted byte strings; node 0 = root) for the compiled
    walk: dfs_parent, dfs_byte, dfs_depth, dfs_end[n] = end of n's subtree; token_node_dfs;
    bfs_to_dfs[n]: BFS node n's DFS index.
    """

    def __init__(self, token_bytes: list[bytes | None]):
        order = sorted((b, i) for i, b in enumerate(token_bytes) if b)
        # DFS construction over the sorted strings: a new node per byte past the common prefix.
        dfs_byte, dfs_parent, dfs_depth = [0], [-1], [0]
        dfs_end = [0]
        path = [0]  # path[d] = node at depth d on the current string
        prev = b""
        tok_dfs = {}
        for b, tid in order:
            lcp = 0
            m = min(len(prev), len(b))
            while lcp < m and prev[lcp] == b[lcp]:
                lcp += 1
            for node in path[lcp + 1 :]:
                dfs_end[node] = len(dfs_byte)
            del path[lcp + 1 :]
            for d in range(lcp, len(b)):
                dfs_end.append(0)
                node = len(dfs_byte)
                dfs_byte.append(b[d])
                dfs_parent.append(path[d])
                dfs_depth.append(d + 1)
                path.append(node)
            tok_dfs[tid] = path[len(b)]
            prev = b
        for node in path:
            dfs_end[node] = len(dfs_byte)
        # DFS order (for the compiled walk): parent, byte, subtree end (exclusive)
        self.dfs_parent = np.asarray(dfs_parent, dtype=np.int32)
        self.dfs_parent[0] = 0
        self.dfs_byte = np.asarray(dfs_byte, dtype=np.int32)
        self.dfs_end = np.asarray(dfs_end, dtype=np.int32)
        depth = np.asarray(dfs_depth, dtype=np.int32)
        self.dfs_depth = depth  # the compiled walk keeps its path's states by depth (_walk.py)
        self.max_depth = int(depth.max(initial=0))
        # dfs_rest[n]: the most bytes any token below DFS node n has left past n
        rest = np.zeros(len(depth), dtype=np.int32)
        by_depth = np.argsort(-depth, kind="stable")
        bounds = np.searchsorted(-depth[by_depth], np.arange(-int(depth.max(initial=0)), 1))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            nodes = by_depth[lo:hi]
            nodes = nodes[nodes > 0]
            np.maximum.at(rest, self.dfs_parent[nodes], rest[nodes] + 1)
        self.dfs_rest = rest
        self.below = subtree_bytes(self.dfs_byte, self.dfs_parent, depth, by_depth, bounds)
        perm = np.argsort(depth, kind="stable")  # BFS position -> DFS index
        self.bfs_to_dfs = perm.astype(np.int32)  # for lookups that walk down BFS and read DFS subtrees
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        n = len(perm)
        self.num_nodes = n
        self.byte = np.asarray(dfs_byte, dtype=np.int32)[perm]
        par = np.asarray(dfs_parent, dtype=np.int64)[perm]
        par[0] = 0
        self.parent = inv[par].astype(np.int32)
        self.parent[0] = -1
        self.depth = depth[perm]
        counts = np.bincount(self.parent[1:], minlength=n).astype(np.int32)
        self.num_children = counts
        first = np.full(n, n, dtype=np.int64)
        np.minimum.at(first, self.parent[1:], np.arange(1, n))
        self.first_child = first.astype(np.int32)
        max_depth = int(self.depth.max()) if n else 0
        self.level_start = np.searchsorted(self.depth, np.arange(max_depth + 2)).astype(np.int32)
        token_node = np.full(len(token_bytes), n, dtype=np.int32)
        token_node_dfs = np.full(len(token_bytes), n, dtype=np.int32)
        if tok_dfs:
            tids = np.fromiter(tok_dfs.keys(), dtype=np.int64, count=len(tok_dfs))
            dns = np.fromiter(tok_dfs.values(), dtype=np.int64, count=len(tok_dfs))
            token_node[tids] = inv[dns]
            token_node_dfs[tids] = dns
        self.token_node = token_node
        self.token_node_dfs = token_node_dfs
        # CSR: token ids ending at each DFS node: tok_ids[tok_start[n] : tok_start[n + 1]]
        valid = np.flatnonzero(token_node_dfs < n)
        order = np.argsort(token_node_dfs[valid], kind="stable")
        self.tok_ids = valid[order].astype(np.int32)
        self.tok_start = np.searchsorted(token_node_dfs[valid][order], np.arange(n + 1)).astype(np.int32)
        self.keep_all = np.ones(n, dtype=np.bool_)  # the walks' `keep` where nothing is skipped (_walk.py)
        # root_child[b]: the DFS node of the root's child on byte b, -1 where no token starts
        # with b: a whole-trie walk goes from one live child of the root to the next through
        # its state's row, not through the dead ones (_core_walk_kernels.walk_roots_core)
        self.root_child = np.full(256, -1, dtype=np.int32)
        kids = np.flatnonzero(depth == 1)
        self.root_child[self.dfs_byte[kids]] = kids

    def subtrees_with(self, flags) -> np.ndarray:
        """keep[i] for each DFS node i: whether some token in i's subtree has its flag set
        (flags: one bool per entry of tok_ids, in their order). A token's subtree is a
        run of tok_ids (tok_start[i] : tok_start[dfs_end[i]]), so this is a prefix sum."""
        sums = np.zeros(len(flags) + 1, dtype=np.int64)
        np.cumsum(flags, out=sums[1:])
        start = self.tok_start[: self.num_nodes]
        return sums[self.tok_start[self.dfs_end]] > sums[start]


def byte_bits(b):
    """(word, bit) of byte b in a two-word byte set: bytes 1..126 each their own bit, NUL,
    DEL and every byte >= 0x80 together bit 0 (a state never loops on it: see
    _core_walk_kernels.loops_over)."""
    b = np.where((b >= 1) & (b <= 126), b, 0)
    return b >> 6, (b & 63).astype(np.uint64)


def subtree_bytes(byte, parent, depth, by_depth, bounds) -> np.ndarray:
    """below[n] (n, 2) uint64: the set of bytes (byte_bits) on the paths below DFS node n,
    n's own byte not included, so a walk at n whose state loops to itself on every one
    of them allows every token of n's subtree without visiting it
    (_core_walk_kernels.walk_roots_core)."""
    below = np.zeros((len(byte), 2), dtype=np.uint64)
    word, bit = byte_bits(byte)
    own = np.left_shift(np.uint64(1), bit)
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # deepest nodes first
        nodes = by_depth[lo:hi]
        nodes = nodes[nodes > 0]
        if not len(nodes):
            continue
        for w in (0, 1):
            x = below[nodes, w] | np.where(word[nodes] == w, own[nodes], np.uint64(0))
            np.bitwise_or.at(below[:, w], parent[nodes], x)
    return below
