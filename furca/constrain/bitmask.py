"""Token bitmask helpers. Layout: int32 [batch, ceil(vocab/32)], bit t of row b (word
t // 32, bit t % 32, little-endian) set = token t allowed (xgrammar / llguidance format).

    apply_token_bitmask_(logits, bitmask, indices=None):
        for each row i (or i in indices): logits[i, t] = -inf where bit t is 0
    memory traffic: reads B * V / 8 bytes of mask, rewrites B * V logits.
"""

from __future__ import annotations

import numpy as np


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """int32 [batch_size, ceil(vocab_size / 32)] filled with -1 (everything allowed)."""
    return np.full((batch_size, (vocab_size + 31) // 32), -1, dtype=np.int32)


def unpack_bitmask(bitmask, vocab_size: int) -> np.ndarray:
    """bool [batch, vocab_size] from a packed bitmask (numpy)."""
    bm = np.ascontiguousarray(bitmask, dtype=np.int32)
    bits = np.unpackbits(bm.view(np.uint8).reshape(bm.shape[0], -1), axis=1, bitorder="little")
    return bits[:, :vocab_size].astype(bool)


def apply_token_bitmask_(logits, bitmask, indices=None):
    """In place: logits (torch float [B, V] or [V]) get -inf where the bit is 0.
    bitmask: int32 [B, ceil(V/32)] numpy array or torch tensor; indices: rows of logits
    (and bitmask) to mask, default all. Columns past the bitmask's width are masked."""
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
