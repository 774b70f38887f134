"""The kernels of string_counters.py: a tokenizer's token trie read through the DFA of one
JSON string character (string_table), the tokens of each length as cumulative bitmasks
(len_levels), the tokens sorted by length (by_length), and a list of tokens set in a
mask (set_bits). Imported only when numba is
installed; kernels at module level (numba's disk cache: see _walk_kernels.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

DEAD = -1  # string_table's DFA: no character goes on with this byte
DONE = -2  # ... this byte ends a character (the DFA is back at its start, state 0)
QUOTE = 0x22


@njit(cache=True, nogil=True)
def string_table(dfa, depth, byte, end, tok_start, tok_ids, tok_len, close_node, close_k):
    """Reads every trie node's path as the content of a JSON string from a character
    boundary (dfa: [state, byte] -> next state, DEAD or DONE; state 0 the boundary). Sets
    tok_len[t] for each token t whose bytes are content: its characters, a character
    begun at its end counted whole (-1 stays for the others); writes to close_node[:m]
    and close_k[:m] the m nodes where the path's first byte at a boundary is the closing
    quote, with the characters before it (their subtrees are not read: what follows
    the string is not the string's). Returns m."""
    n = depth.shape[0]
    st = np.zeros(depth.max() + 2, np.int32)  # the DFA state of the path's node at each depth
    ch = np.zeros(depth.max() + 2, np.int32)  # its characters
    m = 0
    i = 1
    while i < n:
        d = depth[i]
        ps = st[d - 1]
        b = byte[i]
        if ps == 0 and b == QUOTE:
            close_node[m] = i
            close_k[m] = ch[d - 1]
            m += 1
            i = end[i]
            continue
        t = dfa[ps, b]
        if t == DEAD:
            i = end[i]
            continue
        if t == DONE:
            st[d] = 0
            ch[d] = ch[d - 1] + 1
            length = ch[d]
        else:
            st[d] = t
            ch[d] = ch[d - 1]
            length = ch[d] + 1
        for q in range(tok_start[i], tok_start[i + 1]):
            tok_len[tok_ids[q]] = length
        i += 1
    return m


@njit(cache=True, nogil=True)
def len_levels(tok_len, out):
    """out[r] (uint32 words): the tokens t with 0 <= tok_len[t] <= r, for r < len(out)."""
    one = np.uint32(1)
    top = out.shape[0]
    for t in range(tok_len.shape[0]):
        x = tok_len[t]
        if 0 <= x < top:
            out[x, t >> 5] |= one << np.uint32(t & 31)
    for r in range(1, top):
        for w in range(out.shape[1]):
            out[r, w] |= out[r - 1, w]


@njit(cache=True, nogil=True)
def set_bits(words, ids):
    """Sets the bits of the token ids in words (uint32)."""
    one = np.uint32(1)
    for q in range(ids.shape[0]):
        t = ids[q]
        words[t >> 5] |= one << np.uint32(t & 31)


@njit(cache=True, nogil=True)
def by_length(tok_len, ids, lens):
    """Writes the tokens t with tok_len[t] >= 0 to ids, fewest characters first (ids in
    order within a length: a counting sort), their lengths to lens; returns how many."""
    top = 0
    for t in range(tok_len.shape[0]):
        if tok_len[t] > top:
            top = tok_len[t]
    start = np.zeros(top + 2, np.int64)
    for t in range(tok_len.shape[0]):
        if tok_len[t] >= 0:
            start[tok_len[t] + 1] += 1
    for x in range(1, top + 2):
        start[x] += start[x - 1]
    n = start[top + 1]
    for t in range(tok_len.shape[0]):
        x = tok_len[t]
        if x >= 0:
            ids[start[x]] = t
            lens[start[x]] = x
            start[x] += 1
    return n
