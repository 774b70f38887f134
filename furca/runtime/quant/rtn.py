"""Round-to-nearest weight quantizers: an fp weight (N, K) to ``QuantGroups``.

- ``quantize_int8``: per output channel, symmetric. scale = max|w| / 127 per row, codes
  int8 in [-127, 127] (-128 unused, so the grid is symmetric), group = K, no offset.
- ``quantize_int4``: group-wise, asymmetric. Per group of ``group`` consecutive weights
  of a row: scale = (max - min) / 15, offset = min, codes uint8 in 0..15 =
  round((w - min) / scale). The group's min is on the grid exactly and its max within
  fp32 rounding.

Both compute in fp32, so every weight lands within scale / 2 (plus fp32 rounding) of its
dequantized value, and a weight already on the grid comes back exactly. A row (or group)
of equal weights gets scale 0: int8 codes 0 for a zero row, int4 codes 0 with offset =
the value.
"""

from __future__ import annotations

import torch

from furca.runtime.quant.groups import QuantGroups

INT4_GROUPS = (32, 64, 128)


def _check_weight(w: torch.Tensor) -> torch.Tensor:
    if w.dim() != 2 or not w.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (N, K), got {w.dtype} {tuple(w.shape)}")
    return w.detach().to(device="cpu", dtype=torch.float32)


def quantize_int8(w: torch.Tensor) -> QuantGroups:
    """Per-output-channel symmetric int8: w[n, k] ~ scale[n] * codes[n, k]."""
    w = _check_weight(w)
    scale = w.abs().amax(dim=1, keepdim=True) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(w / safe).clamp_(-127, 127).to(torch.int8)
    return QuantGroups(codes, scale.contiguous(), None, w.shape[1], 8, "int8")


def quantize_int4(w: torch.Tensor, group: int) -> QuantGroups:
    """Group-wise asymmetric int4: w[n, k] ~ scale[n, g] * codes[n, k] + offset[n, g]
    with g = k // group; ``group`` is one of INT4_GROUPS and must divide K."""
    w = _check_weight(w)
    n, k = w.shape
    if group not in INT4_GROUPS:
        raise ValueError(f"int4 group must be one of {INT4_GROUPS}, got {group}")
    if k % group:
        raise ValueError(f"int4 group {group} does not divide the row length {k} of a {n}x{k} weight")
    g = w.view(n, k // group, group)
    lo = g.amin(dim=2)
    scale = (g.amax(dim=2) - lo) / 15.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round((g - lo[..., None]) / safe[..., None]).clamp_(0, 15).to(torch.uint8)
    return QuantGroups(codes.view(n, k), scale.contiguous(), lo.contiguous(), group, 4, "int4")
