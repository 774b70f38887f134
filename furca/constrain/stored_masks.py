"""The stored forms of a token mask (masks.TokenMasks keeps one per state; the matcher's
warm fill writes them): a packed int32 row, (word indices, words) when few words are
non-zero, or a Delta over another kept mask. See DESIGN.md ("Masks: computed once per
state")."""

from __future__ import annotations

import numpy as np

from . import _walk

SPARSE_WORDS = 256  # masks with at most this many non-zero words are stored sparse


class Delta:
    """A stored mask as another one's words with a few replaced: base (a packed int32
    mask, read-only, stored or shared: an abstract state's, a slice's, a key trie's
    "any key" words) with base[idx] = words. A state whose mask is its abstract state's
    plus the few tokens that leave the rule (`",` and the like) or a slice's plus a walk's
    keeps ~1-2 KB instead of a copy of every word (16 KB for Llama-3.1): in a process
    forked per request, as the shared harness runs, each such copy was 4 new pages to
    fault in (~2.5-3.3 us each here). On the 500 sample's steps in forked children the
    page faults fell 3% by this alone (437k -> 426k, 412k -> 400k in two pairs of runs);
    the memory it saves is the larger part (the store's bytes)."""

    __slots__ = ("base", "idx", "words")

    def __init__(self, base, idx, words):
        self.base, self.idx, self.words = base, idx, words

    def packed(self) -> np.ndarray:
        out = self.base.copy()
        out[self.idx] = self.words
        return out


def _stored(packed, base=None):
    """The stored form of a packed int32 mask: (word indices intp, words) when at most
    SPARSE_WORDS words are non-zero; a Delta over base (a packed int32 mask that stays
    as it is) when at most SPARSE_WORDS words differ from it; else packed itself (made
    read-only). The indices are kept intp: ``out[idx] = words`` with intp indices takes
    numpy's fast path (~1.0 us for 256 words against ~2.6 us for ``out.put`` with int32
    ones, which casts them each time), for 4 more bytes per stored word. With numba the
    choice is one compiled pass that stops at the first word past the limit
    (_walk_kernels.sparse_words), not two or three passes over the whole row."""
    kern = _walk.kernel("sparse_words")
    if kern is not None:
        has_base = base is not None and base.shape == packed.shape
        idx = np.empty(SPARSE_WORDS + 1, np.intp)
        kind, n = kern(packed, base if has_base else packed, has_base, idx)
        if kind == 2:
            packed.setflags(write=False)  # shared: mask() returns it, several states may store it
            return packed
        idx = idx[:n].copy()
        return (idx, packed[idx]) if kind == 0 else Delta(base, idx, packed[idx])
    live = packed != 0
    if np.count_nonzero(live) > SPARSE_WORDS:
        if base is not None and base.shape == packed.shape:
            diff = packed != base
            if np.count_nonzero(diff) <= SPARSE_WORDS:
                idx = diff.nonzero()[0]
                return Delta(base, idx, packed[idx])
        packed.setflags(write=False)  # shared: mask() returns it, several states may store it
        return packed
    nz = live.nonzero()[0]  # intp; ~3x faster than np.flatnonzero on the int words
    return nz, packed[nz]


def _base_of(m):
    """The packed words a mask computed from the stored mask m may be stored against (a
    Delta's own base: Deltas do not chain), or None."""
    if type(m) is np.ndarray:
        return m
    return m.base if type(m) is Delta else None


def _size(m):
    """Bytes of a stored mask (a Delta's base is counted where it is stored)."""
    if type(m) is tuple:
        return m[0].nbytes + m[1].nbytes
    if type(m) is Delta:
        return m.idx.nbytes + m.words.nbytes
    return m.nbytes


def write_stored(m, out: np.ndarray) -> None:
    """Writes the stored mask m (see _stored) into the int32 row out (len >= the mask's
    words; the rest zeroed)."""
    if type(m) is tuple:  # fill + intp fancy set: ~0.6 + 0.4-0.7 us for up to 256 words
        out.fill(0)
        out[m[0]] = m[1]
    elif type(m) is Delta:
        write_stored(m.base, out)
        out[m.idx] = m.words
    elif len(out) == len(m):  # a bitmask row of exactly num_words: ~0.2 us less than slicing
        out[...] = m
    else:
        n = len(m)
        out[:n] = m
        out[n:] = 0
