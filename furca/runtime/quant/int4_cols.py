"""``Int4Cols``: furca's own CPU int4 layout, computed by a numba matvec (cpu_int4_kernels.py).

The weight (N, K) is stored transposed, two rows a byte: ``codes`` (K, N / 2) uint8 with
byte [k, d] = q[d, k] | q[d + N / 2, k] << 4, and per group one (scale, offset) pair per row as fp16 bits, ``scale`` / ``offset``
(K / group, N): w = scale * q + offset, q in 0..15 (a signed code c gets q = c + 8 and offset -8 * scale). 0.5 byte a weight plus 4
bytes a group, as GGUF Q4_1 and torch's int4 pack. Only groups whose scale and offset
fp16 holds exactly are taken (``Int4Cols.pack`` returns None otherwise; every GGUF Q4_0 /
Q4_1 tensor fits), so the layout is lossless against its ``QuantGroups``.

``matvec`` computes a few rows of x in fp32 (the scale and offset once per group). The
layout is measured against torch's int4 op by bench/quant_int4_matvec.py and is not
chosen by ``packed.pack``: torch's op is faster on this CPU (docs/quantization.md).
"""

from __future__ import annotations

import numpy as np
import torch

from furca.runtime import omp_team
from furca.runtime.quant.groups import QuantGroups

_ALIGN = 32  # N is padded to a multiple of this with zero rows (16-byte runs of byte columns)


def fp16_bits(t: torch.Tensor) -> np.ndarray | None:
    """t (fp32) as fp16 bits (uint16), or None where fp16 does not hold it exactly."""
    h = t.to(torch.float16)
    if not torch.equal(h.to(torch.float32), t):
        return None
    return h.view(torch.int16).numpy().view(np.uint16)


def unsigned_fp16(groups: QuantGroups, align: int,
                  group_ok: bool) -> tuple[torch.Tensor, np.ndarray, np.ndarray] | None:
    """``groups`` (when ``group_ok`` and its codes take at most 4 bits) as unsigned codes q (N padded to a multiple of ``align`` with zero rows,
    K) int32 in 0..15 and contiguous fp16 bits of scale and offset (K / group, N padded),
    w = scale * q + offset (a signed code c gets q = c + 8 and offset -8 * scale); None
    when a code falls outside 0..15 or fp16 does not hold a scale or an offset exactly."""
    if groups.bits > 4 or not group_ok:
        return None
    n, k = groups.shape
    q = groups.codes.to(torch.int32)
    offset = torch.zeros_like(groups.scale) if groups.offset is None else groups.offset
    if groups.signed:
        q, offset = q + 8, offset - 8.0 * groups.scale
    if int(q.min()) < 0 or int(q.max()) > 15:
        return None
    scale16, offset16 = fp16_bits(groups.scale.t().contiguous()), fp16_bits(offset.t().contiguous())
    if scale16 is None or offset16 is None:
        return None
    pad = -n % align
    if pad:  # zero rows (q = 0, scale = offset = 0)
        q = torch.cat([q, q.new_zeros(pad, k)])
        zeros = np.zeros((k // groups.group, pad), np.uint16)
        scale16, offset16 = np.concatenate([scale16, zeros], 1), np.concatenate([offset16, zeros], 1)
    return q, np.ascontiguousarray(scale16), np.ascontiguousarray(offset16)


class Int4Cols:
    """A 4-bit weight in the transposed two-rows-a-byte layout (see the module docstring)."""

    def __init__(self, codes: np.ndarray, scale: np.ndarray, offset: np.ndarray, shape: tuple[int, int]):
        self.codes, self.scale, self.offset, self.shape = codes, scale, offset, shape

    @staticmethod
    def pack(groups: QuantGroups) -> "Int4Cols | None":
        """The layout of ``groups``, or None when its codes need more than 4 bits, its
        group is not a multiple of 4, or fp16 does not hold its scales and offsets exactly."""
        fit = unsigned_fp16(groups, _ALIGN, groups.group % 4 == 0)  # the kernel takes four k a pass
        if fit is None:
            return None
        (q, scale16, offset16), (n, k) = fit, groups.shape
        h = q.shape[0] // 2
        qt = q.t().to(torch.uint8)
        codes = (qt[:, :h] | (qt[:, h:] << 4)).contiguous().numpy()
        return Int4Cols(codes, scale16, offset16, (n, k))

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes + self.offset.nbytes

    @property
    def group(self) -> int:
        return self.shape[1] // self.scale.shape[0]

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight (N, K)."""
        c = torch.from_numpy(self.codes)
        q = torch.cat([c & 15, c >> 4], dim=1).t().to(torch.float32)  # (N padded, K)
        sc = torch.from_numpy(self.scale.view(np.int16)).view(torch.float16).float().t()
        of = torch.from_numpy(self.offset.view(np.int16)).view(torch.float16).float().t()
        n, k = self.shape
        w = q.view(q.shape[0], -1, self.group) * sc[..., None] + of[..., None]
        return w.view(-1, k)[:n]

    def matvec(self, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        """x (M, K) fp32 contiguous -> x @ w.T (M, N) fp32, on torch's OpenMP team when
        it is reachable and the weight is worth splitting, else on the calling thread."""
        from furca.runtime.quant import cpu_int4_kernels as kern

        m, k = x.shape
        xsum = x.reshape(m, self.scale.shape[0], -1).sum(axis=2, dtype=np.float32)
        h, groups = self.codes.shape[1], self.scale.shape[0]
        threads = threads or torch.get_num_threads()
        parts = min(threads, groups)
        if parts > 1 and omp_team.available():
            partial = np.empty((parts, m, 2 * h), np.float32)
            args = np.array([0, parts, m, k, h, groups, self.offset.shape[0], x.ctypes.data, xsum.ctypes.data,
                             self.codes.ctypes.data, self.scale.ctypes.data, self.offset.ctypes.data,
                             partial.ctypes.data], np.int64)
            omp_team.run(kern.int4_cols_team, args, threads)
            out = partial.sum(axis=0)
        else:
            out = np.empty((m, 2 * h), np.float32)
            kern.int4_cols_matmul(x, xsum, self.codes, self.scale, self.offset, out, 0, groups)
        return out[:, :self.shape[0]]
