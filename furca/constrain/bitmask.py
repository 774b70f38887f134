"""Token bitmask helpers. Layout: int32 [batch, ceil(vocab/32)], bit t of row b (word
t // 32, bit t % 32, little-endian) set = token t allowed (xgrammar / llguidance format).

    apply_token_bitmask_(logits, bitmask, indices=None):
        for each row i (or i in indices): logits[i, t] = -inf where bit t is 0
    memory traffic: reads B * V / 8 bytes of mask, rewrites B * V logits.
"""

from __future__ import annotations

import numpy as np

from . import _walk


def allowed_ids(words: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The ids (an int array) whose bits are set in words (one mask row viewed as uint32)."""
    return ids[((words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).astype(bool)]


def distinct(ids: np.ndarray, fresh: bool = False) -> np.ndarray:
    """ids' distinct values, sorted: np.unique's result through array methods and ufuncs
    only (fresh: ids is the caller's own new array, sorted in place). numpy 2.4's
    np.unique (and union1d, intersect1d without assume_unique, isin, which call it) goes
    through a hash table first: 45 µs for 800 int64 ids against 5 µs sorted, 370 against
    27 for 5,000; and its Python-level set functions write ~7 pages of their code at their
    first call in a process forked after set-up, as the shared harness runs."""
    if len(ids) < 2:
        return ids if fresh else ids.copy()
    s = ids if fresh else ids.copy()
    s.sort()
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def clear_ids(words: np.ndarray, ids: np.ndarray) -> None:
    """Clears the bits of ids (an int array) in words (one mask row viewed as uint32):
    with numba, for the argument types its warm-up loaded (contiguous writable uint32
    words, int32 ids: a token trie's id runs), a compiled loop; else
    np.bitwise_and.at (~5 µs a call, ~25 µs for the ~1,500 tokens below a lone quote)."""
    kern = _walk.kernel("clear_bits")
    if (kern is not None and ids.dtype == np.int32 and words.dtype == np.uint32 and words.flags.c_contiguous
            and words.flags.writeable and ids.flags.c_contiguous and ids.flags.writeable):
        kern(words, ids)
    else:
        np.bitwise_and.at(words, ids >> 5, ~(np.uint32(1) << (ids & 31).astype(np.uint32)))


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A bitmask for `Matcher.fill_bitmask`, every token allowed.

    Parameters
    ----------
    batch_size : int
        Rows: one per request of the batch.
    vocab_size : int
        The logits width (TokenizerInfo.vocab_size).

    Returns
    -------
    bitmask : numpy.ndarray
        int32, shape (batch_size, ceil(vocab_size / 32)), filled with -1 (all bits set).
        ``torch.from_numpy`` shares its memory.
    """
    return np.full((batch_size, (vocab_size + 31) // 32), -1, dtype=np.int32)


def unpack_bitmask(bitmask, vocab_size: int) -> np.ndarray:
    """The allowed tokens of a packed bitmask, one bool per token.

    Parameters
    ----------
    bitmask : array-like
        int32, 2-D: shape (batch, >= ceil(vocab_size / 32)) (numpy, or a CPU tensor).
    vocab_size : int
        How many tokens to unpack per row.

    Returns
    -------
    allowed : numpy.ndarray
        bool, shape (batch, vocab_size): allowed[b, t] is bit t of row b.
    """
    bm = np.ascontiguousarray(bitmask, dtype=np.int32)
    bits = np.unpackbits(bm.view(np.uint8).reshape(bm.shape[0], -1), axis=1, bitorder="little")
    return bits[:, :vocab_size].astype(bool)


def apply_token_bitmask_(logits, bitmask, indices=None):
    """Masks logits in place: -inf where a token's bit is 0 (plain torch, any device).

    Parameters
    ----------
    logits : torch.Tensor
        float, shape (B, V) or (V,); written in place.
    bitmask : numpy.ndarray or torch.Tensor
        int32, shape (B, W) or (W,), W = ceil(V / 32) or more; copied to logits' device.
        Columns of logits past W * 32 are masked.
    indices : sequence of int, optional
        The rows of logits (and of bitmask) to mask; default every row. Other rows are
        left as they are.

    Returns
    -------
    logits : torch.Tensor
        The same tensor.

    Raises
    ------
    IndexError
        If an index is outside logits' or bitmask's rows (torch's error).
    """
    import torch

    squeeze = logits.dim() == 1
    lg = logits.unsqueeze(0) if squeeze else logits
    bm = torch.as_tensor(bitmask)
    if bm.dim() == 1:
        bm = bm.unsqueeze(0)
    bm = bm.to(device=lg.device, dtype=torch.int32)
    vocab = lg.shape[-1]
    shifts = torch.arange(32, device=lg.device, dtype=torch.int32)
    rows = range(lg.shape[0]) if indices is None else [int(i) for i in indices]
    rows = list(rows)
    if not rows:
        return logits
    idx = torch.tensor(rows, device=lg.device, dtype=torch.long)
    words = bm.index_select(0, idx)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(len(rows), -1)  # (R, W*32)
    n = min(vocab, allowed.shape[1])
    keep = torch.zeros(len(rows), vocab, dtype=torch.bool, device=lg.device)
    keep[:, :n] = allowed[:, :n]
    sub = lg.index_select(0, idx).masked_fill(~keep, float("-inf"))
    lg.index_copy_(0, idx, sub)
    return logits
