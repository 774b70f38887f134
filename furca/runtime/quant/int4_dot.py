"""``Int4Dot``: int4 weights in groups of 32 computed with integer dot products (AVX-512
VNNI) against x rounded to int16 per group of 32 (kernels: cpu_int4_dot_kernels.py).

The weight (N, K) is stored in blocks of 16 rows, each contiguous: ``words`` (N / 16, K /
8, 16) uint32 (word [b, r, t]: q[16 b + t, 8 r + i] in the low nibble of byte i, q[16 b +
t, 8 r + 4 + i] in the high one) and per group of 32 one (scale, offset) pair per row as
fp16 bits, ``scale`` / ``offset`` (N / 16, K / 32, 16): w = scale * q + offset, q in
0..15 (a signed code c gets q = c + 8 and offset -8 * scale). Lossless against its
``QuantGroups`` (``pack`` declines groups fp16 does not hold exactly); the loss is x's.
x is rounded to int16 per group of 32 (each code dotted as two int8 halves by ``vpdpbusd``):
about 2e-5 of max |y| on the default model's weights (bench/quant_int4_matvec.py), below
torch's int4 op's 2-4e-3 (bf16 x and bf16 scales). The int8 rounding (llama.cpp's Q4_1 x
Q8_1 arithmetic, ``x_bits = 8``) costs about 1e-2 and flips the default model's greedy
near-tie on "What is the capital of France?"; it is kept as an option for measurement.
``packed.pack`` takes this layout only with ``packed.INT4_DOT`` on.
"""

from __future__ import annotations

import numpy as np
import torch

from furca.runtime import omp_team
from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.packed import PackedWeight, _as_torch, _scratch, _split_rows

_GROUP = 32
_ALIGN = 16  # N is padded to a multiple of this with zero rows (one 512-bit vector of int32)
# Rows of x (bf16 or fp32) computed by the kernel; more: dequantize + F.linear. On an
# AVX512_VNNI CPU without native bf16 the kernel was 2.7x (fp32 x) and 5.4x (bf16 x) faster
# at 32 rows and still ahead at 256 (fp32); 32 leaves room for CPUs whose bf16 GEMM is fast
# (AMX), where dequantizing (~0.3-0.5 ns a weight) is most of the other path's time
SMALL_M = 32
_VNNI: list[bool] = []


def vnni_available() -> bool:
    """Whether this CPU runs the kernels (AVX512_VNNI, with numba installed)."""
    if not _VNNI:
        try:
            import llvmlite.binding as ll
            import numba  # noqa: F401
            _VNNI.append(bool(ll.get_host_cpu_features().get("avx512vnni")))
        except ImportError:
            _VNNI.append(False)
    return _VNNI[0]


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


class Int4Dot(PackedWeight):
    """A 4-bit weight in groups of 32 in the VNNI word layout (see the module docstring).
    ``x_bits``: x's rounding in ``matvec``, 16 (the default) or 8."""

    x_bits = 16

    def __init__(self, words: np.ndarray, scale: np.ndarray, offset: np.ndarray, shape: tuple[int, int]):
        self.words, self.scale, self.offset, self.shape = words, scale, offset, shape
        self.small_m = self.small_m_fp32 = SMALL_M
        self._addresses: tuple[int, int, int] | None = None

    @staticmethod
    def pack(groups: QuantGroups) -> "Int4Dot | None":
        """The layout of ``groups``, or None when its codes need more than 4 bits, its
        group is not 32, or fp16 does not hold its scales and offsets exactly."""
        fit = unsigned_fp16(groups, _ALIGN, groups.group == _GROUP)
        if fit is None:
            return None
        (q, scale16, offset16), (n, k) = fit, groups.shape
        c = q.to(torch.int64).view(q.shape[0], k // 8, 2, 4)  # [n, r, low / high nibble, byte i]
        shifts = 8 * torch.arange(4)
        words = ((c[:, :, 0] << shifts) | (c[:, :, 1] << (shifts + 4))).sum(dim=2)  # (N, K / 8), disjoint bits
        nb, groups = q.shape[0] // _ALIGN, k // _GROUP
        words = words.to(torch.int32).view(nb, _ALIGN, k // 8).transpose(1, 2).contiguous().numpy().view(np.uint32)

        def blocked(t16: np.ndarray) -> np.ndarray:  # (G, N) -> (N / 16, G, 16)
            return np.ascontiguousarray(t16.reshape(groups, nb, _ALIGN).transpose(1, 0, 2))

        return Int4Dot(words, blocked(scale16), blocked(offset16), (n, k))

    @property
    def nbytes(self) -> int:
        return self.words.nbytes + self.scale.nbytes + self.offset.nbytes

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self._unpack(slice(0, self.shape[0])).to(dtype)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._unpack(ids.numpy())

    def _unpack(self, rows) -> torch.Tensor:
        """The fp32 weight rows ``rows`` (a slice or an index array) -> (len, K)."""
        flat = self.words.transpose(1, 0, 2).reshape(self.words.shape[1], -1)  # (K / 8, N)
        w = torch.from_numpy(flat[:, rows].view(np.int32)).to(torch.int64).t()  # (rows, K / 8)
        shifts = 8 * torch.arange(4)
        low, high = (w[..., None] >> shifts) & 15, (w[..., None] >> (shifts + 4)) & 15
        q = torch.stack([low, high], dim=2).reshape(w.shape[0], -1).to(torch.float32)
        sc, of = (torch.from_numpy(a.transpose(1, 0, 2).reshape(a.shape[1], -1)[:, rows].view(np.int16))
                  .view(torch.float16).float().t() for a in (self.scale, self.offset))
        return (q.view(q.shape[0], -1, _GROUP) * sc[..., None] + of[..., None]).view(q.shape[0], -1)

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in (torch.float32, torch.bfloat16):
            return self.dequantize(dtype)
        from furca.runtime.quant import cpu_int4_dot_kernels as kern

        k, n = self.shape[1], self.words.shape[0] * _ALIGN
        out_t = _scratch((k, n), dtype)  # the transposed weight: F.linear reads the view as it is
        _split_rows(kern.dequant_words_t, (k // 8, 8 * n), self.words, self.scale, self.offset, out_t)
        return _as_torch(out_t)[:, :self.shape[0]].t()

    def _small(self, x: torch.Tensor) -> torch.Tensor:
        return self.matvec(x)

    def matvec(self, x: torch.Tensor, threads: int | None = None) -> torch.Tensor:
        """x (M, K) fp32 or bf16, contiguous -> x @ w.T (M, N) in x's dtype (accumulated in
        fp32; x rounded to ``x_bits`` per group of 32); on torch's OpenMP team (the rows
        split between its threads) when it is reachable, else on the calling thread."""
        from furca.runtime.quant import cpu_int4_dot_kernels as kern

        if self.x_bits not in (8, 16):
            raise ValueError(f"Int4Dot.x_bits must be 8 or 16, got {self.x_bits}")
        team, matmul = (kern.int4_dot16_team, kern.int4_dot16_matmul) if self.x_bits == 16 \
            else (kern.int4_dot_team, kern.int4_dot_matmul)

        m, k = x.shape
        nb, groups = self.scale.shape[:2]
        n = nb * _ALIGN
        out = torch.empty((m, n), dtype=x.dtype)
        bf16 = x.dtype == torch.bfloat16
        threads = threads or torch.get_num_threads()
        parts = min(threads, nb)
        if parts > 1 and omp_team.available():
            if self._addresses is None:  # the weight's arrays never move
                self._addresses = (self.words.ctypes.data, self.scale.ctypes.data, self.offset.ctypes.data)
            args = np.array([0, parts, m, k, n, groups, 0, x.data_ptr(), bf16,
                             *self._addresses, out.data_ptr()], np.int64)
            omp_team.run(team, args, threads)
        else:
            xn, on = (x.view(torch.int16).numpy().view(np.uint16), out.view(torch.int16).numpy().view(np.uint16)) \
                if bf16 else (x.numpy(), out.numpy())
            matmul(xn, self.words, self.scale, self.offset, on, 0, nb)
        return out[:, :self.shape[0]]
