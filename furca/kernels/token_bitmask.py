"""Apply a packed token bitmask to logits in place (xgrammar / llguidance format).

    apply_token_bitmask_(logits, bitmask, indices=None):
        for i in (indices if indices is not None else range(B)):   # row of logits AND bitmask
            allowed = (bitmask[i, t // 32] >> (t % 32)) & 1          # for t in range(V)
            logits[i, t] = -inf  where not allowed (or t // 32 >= bitmask width)

``logits``: float ``(B, V)`` or ``(V,)``, any row stride, contiguous columns;
``bitmask``: int32 ``(B, W)`` (``W = ceil(V / 32)`` normally; a narrower mask masks
the columns past it, bits past ``V`` are ignored), torch or numpy, moved to the
logits' device; ``indices``: rows to mask (sequence of ints or a tensor), default all.
``apply_token_bitmask_ref`` is the specification in plain torch; the constrained
decoder's CPU path (``furca.constrain.apply_token_bitmask_``) has the same semantics
(tests/kernels/test_token_bitmask.py checks the two agree).

Grid ``(rows, ceil(W / BLOCK_W))``: a program expands ``BLOCK_W`` words into
``BLOCK_W x 32`` bits and stores ``-inf`` only where a bit is 0.
Memory traffic: reads ``rows * W * 4`` bytes of mask; writes only the masked logits
(at most ``rows * V`` elements); never reads logits.
"""

import numpy as np
import torch

from furca.kernels._triton import check, require_triton, tl, triton


def apply_token_bitmask_ref(logits: torch.Tensor, bitmask, indices=None) -> torch.Tensor:
    """The specification in plain torch: in place, returns ``logits``."""
    lg = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bm = torch.as_tensor(bitmask)
    bm = (bm.unsqueeze(0) if bm.dim() == 1 else bm).to(device=lg.device, dtype=torch.int32)
    tokens = torch.arange(lg.shape[1], device=lg.device)
    in_mask = tokens // 32 < bm.shape[1]  # columns past the mask's width are disallowed
    word, bit = (tokens // 32).clamp(max=max(bm.shape[1] - 1, 0)), (tokens % 32).to(torch.int32)
    for row in (range(lg.shape[0]) if indices is None else [int(i) for i in indices]):
        allowed = in_mask & (((bm[row, word] >> bit) & 1) != 0) if bm.shape[1] else in_mask
        lg[row].masked_fill_(~allowed, float("-inf"))
    return logits


@triton.jit
def _apply_token_bitmask_kernel(
    logits_ptr, bitmask_ptr, indices_ptr,
    vocab_size, num_words, stride_logits_row, stride_bitmask_row,
    HAS_INDICES: tl.constexpr, BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    if HAS_INDICES:
        row = tl.load(indices_ptr + pid).to(tl.int64)
    else:
        row = pid.to(tl.int64)
    offs_w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    words = tl.load(bitmask_ptr + row * stride_bitmask_row + offs_w, mask=offs_w < num_words, other=0)
    bits = tl.arange(0, 32)
    allowed = ((words[:, None] >> bits[None, :]) & 1) != 0  # (BLOCK_W, 32)
    tokens = offs_w[:, None] * 32 + bits[None, :]
    tl.store(logits_ptr + row * stride_logits_row + tokens, float("-inf"),
             mask=(tokens < vocab_size) & ~allowed)


def apply_token_bitmask_(logits: torch.Tensor, bitmask, indices=None) -> torch.Tensor:
    """In place; returns ``logits``. See the module docstring."""
    require_triton()
    squeeze = logits.dim() == 1
    lg = logits.unsqueeze(0) if squeeze else logits
    check(lg.dim() == 2 and lg.dtype.is_floating_point,
          f"logits must be a float (B, V) or (V,) tensor, got {lg.dtype} {tuple(logits.shape)}")
    check(lg.stride(1) == 1 or lg.shape[1] <= 1, "logits must have contiguous columns (stride 1)")
    if isinstance(bitmask, np.ndarray):
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    bm = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    check(bm.dtype == torch.int32 and bm.dim() == 2,
          f"bitmask must be int32 (B, ceil(V/32)), got {bm.dtype} {tuple(bitmask.shape)}")
    if bm.device != lg.device or bm.stride(1) != 1:
        bm = bm.to(lg.device).contiguous()
    vocab = lg.shape[1]
    if indices is None:
        num_rows = lg.shape[0]
        check(bm.shape[0] >= num_rows, f"bitmask has {bm.shape[0]} rows, logits {num_rows}")
        idx = bm  # unused pointer
    else:
        idx = torch.as_tensor(indices, dtype=torch.int64).to(lg.device)
        check(idx.dim() == 1, f"indices must be 1-D, got shape {tuple(idx.shape)}")
        num_rows = idx.shape[0]
    num_words = min(bm.shape[1], triton.cdiv(vocab, 32))  # columns past the mask: masked below
    if num_rows == 0 or vocab == 0:
        return logits
    block_w = min(128, triton.next_power_of_2(max(num_words, 1)))
    if num_words > 0:
        _apply_token_bitmask_kernel[(num_rows, triton.cdiv(num_words, block_w))](
            lg, bm, idx, vocab, num_words, lg.stride(0), bm.stride(0),
            HAS_INDICES=indices is not None, BLOCK_W=block_w, num_warps=4,
        )
    if num_words * 32 < vocab:  # a mask narrower than the vocabulary disallows the rest
        if indices is None:
            lg[:, num_words * 32:] = float("-inf")
        else:
            lg[idx, num_words * 32:] = float("-inf")
    return logits
