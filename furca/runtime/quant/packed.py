"""CPU compute layouts of a quantized weight, and their matmuls.

``pack(groups, device)`` turns a ``QuantGroups`` into a ``PackedWeight``: the resident
form of the weight plus ``matmul(x)`` (x (M, K) fp32 or bf16 -> (M, N) in x's dtype),
``embedding(ids)`` (fp32 rows), ``dequantize()`` (the fp32 weight the layout computes
with), ``nbytes`` and ``shape``. Two layouts, chosen by what the groups hold:

- ``Int4Packed`` (codes of 4 bits or fewer, any offset, a group torch's int4 op can
  express): torch's CPU int4 pack, two codes a byte, with one bf16 (scale, zero) pair per
  group, w = (q - 8) * scale + zero, so q = code (+ 8 for signed codes) and zero =
  offset (+ 8 * scale for unsigned codes). The bf16 rounding of scale and zero is the
  one loss against the groups' fp32 (bench/quant_linear.py measures it). A group torch
  does not take (it takes 32, 64, 128, 256) but a multiple of one of them is split into
  those, its scale repeated: exact. N is padded to a multiple of 64 (the pack's row block)
  with zero rows, cut off the output.
- ``GroupInt8`` (everything else: 5..8-bit codes such as Q8_0, Q5_K, Q6_K and rtn int8,
  and 4-bit codes in groups torch cannot express): the codes one byte each (int8 or
  uint8 as given) with fp32 scale and offset per group, computed by a numba kernel in
  fp32 (cpu_kernels.py), so an fp32 x gets fp32 outputs (the LM head).

Path per call, by M (rows of x): at most ``small_m`` rows (``small_m_fp32`` for an fp32
x) use the packed kernel, which
reads each weight byte once per call; more rows dequantize the weight (this one weight,
to x's dtype) and call F.linear, whose blocked GEMM wins once the kernel's per-row cost
outgrows one dequantization. The limits are measured by bench/quant_linear.py.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from furca.runtime import omp_team
from furca.runtime.quant.groups import QuantGroups

_TORCH_INT4_GROUPS = (256, 128, 64, 32)


def _int4pack_half() -> int | None:
    """How torch's CPU int4 pack (`_convert_weight_to_int4pack_for_cpu`) lays out rows on
    this build and CPU: in blocks of 2h rows, byte [b, k, d] = q[2h b + d, k] | q[2h b + d
    + h, k] << 4, with h = 32 where its kernels are AVX-512 and 16 on AVX2 (it packs for
    the CPU it runs on). Probed once on a pattern; None for any other layout (pack() then
    keeps the weights in furca's own GroupInt8 layout)."""
    n, k = 64, 32
    q = torch.zeros(n, k, dtype=torch.int32)
    q[:, 0] = torch.arange(n, dtype=torch.int32) % 16
    q[:, 1] = torch.arange(n, dtype=torch.int32) // 16
    try:
        p = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1).view(-1).to(torch.int32)
    except (RuntimeError, AttributeError):
        return None
    for h in (32, 16):
        if torch.equal(_unpack_int4(p, k, h)[:n], q):
            return h
    return None


def _unpack_int4(packed: torch.Tensor, k: int, h: int) -> torch.Tensor:
    """The codes (rows padded to 2h, K) of torch's CPU int4 pack in blocks of 2h rows:
    byte [b, k, d] = q[2h b + d, k] | q[2h b + d + h, k] << 4."""
    blocks = packed.view(-1, k, h)
    return torch.cat([blocks & 15, blocks >> 4], dim=2).transpose(1, 2).reshape(-1, k)


_INT4PACK_HALF = _int4pack_half()
# rows per block of torch's CPU int4 pack (two halves a byte); 0: the pack's layout is not known
_ROW_BLOCK = 2 * _INT4PACK_HALF if _INT4PACK_HALF else 0

# Rows of x up to which the packed kernels beat dequantize + F.linear (bench/quant_linear.py).
INT8_CHANNEL_SMALL_M = 4  # int8 per channel with a bf16 x: torch's int8 kernel up to this many rows
INT4_SMALL_M = 32
INT4_SMALL_M_FP32 = 1  # torch's int4 op with an fp32 x (fp32 scale / zero) is several times slower
GROUP_INT8_SMALL_M = 12
GROUP_INT8_SMALL_M_FP32 = 24  # fp32 F.linear (no AMX) is slower than bf16: the kernel wins longer
# True: fp16-exact 4-bit groups of 32 (GGUF Q4_0 / Q4_1) take int4_dot.Int4Dot where the CPU
# has AVX512_VNNI (x rounded to int16: ~2e-5 of max |y|; in a batch-1 decode step on par with
# torch's int4 op with a bf16 x, 11x faster with an fp32 x; docs/quantization.md). False:
# torch's int4 pack for them too
INT4_DOT = True

# Below this many weights per thread a split costs more than it saves (a hand-off is ~30 us).
_MIN_WEIGHTS_PER_THREAD = 1 << 16

# Largest dequantized weight kept in a per-thread scratch buffer (the projections' sizes;
# a larger one, such as an LM head in fp32, is allocated per call).
_SCRATCH_BYTES = 32 << 20
_LOCAL = threading.local()

_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []
_KERNELS: list = []  # [cpu_kernels module or None] once resolved
os.register_at_fork(after_in_child=_POOL.clear)


class PackedWeight:
    """A quantized weight in a compute layout (the contract every layout keeps)."""

    shape: tuple[int, int]
    small_m: int  # most rows of a bf16 x computed by the packed kernel
    small_m_fp32: int  # the same for an fp32 x

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., K) fp32 or bf16 -> x @ w.T (..., N) in x's dtype."""
        if x.dim() < 1 or x.shape[-1] != self.shape[1] or x.dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"x must be (M, {self.shape[1]}) fp32 or bf16, got {x.dtype} {tuple(x.shape)}")
        x2 = x.reshape(-1, self.shape[1])
        limit = self.small_m if x.dtype == torch.bfloat16 else self.small_m_fp32
        if x2.shape[0] == 0:
            y = x2.new_empty((0, self.shape[0]))
        elif x2.shape[0] > limit:
            y = F.linear(x2, self._weight(x.dtype))
        else:
            y = self._small(x2.contiguous())
        return y.view(*x.shape[:-1], self.shape[0])

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        """The fp32 rows ``ids`` (any shape of row indices) -> (*ids.shape, K)."""
        flat = ids.reshape(-1).to(torch.long)
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.shape[0]):
            raise IndexError(f"embedding ids must be in [0, {self.shape[0]})")
        return self._rows(flat).view(*ids.shape, self.shape[1])

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight (N, K) this layout computes with, in ``dtype``."""
        raise NotImplementedError

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype`` for the large-M path: ``dequantize`` up to rounding
        (the numba kernels may fuse multiply-adds), as fast as the layout allows. It may
        live in the calling thread's scratch buffer: valid until that thread's next
        ``_weight`` call, so use it at once."""
        return self.dequantize(dtype)

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    def _small(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def _torch_int4_group(groups: QuantGroups) -> int | None:
    if groups.bits > 4:
        return None
    return next((g for g in _TORCH_INT4_GROUPS if groups.group % g == 0), None)


def pack(groups: QuantGroups, device: torch.device | str = "cpu") -> PackedWeight:
    """The compute layout for ``groups`` on ``device`` (CPU layouts here; the CUDA ones
    live in furca/kernels/dequant_matmul.py)."""
    if torch.device(device).type != "cpu":
        raise ValueError(f"packed.py holds the CPU layouts; got device {device}")
    tg = _torch_int4_group(groups) if _ROW_BLOCK else None
    if tg is None:
        return GroupInt8(groups)
    dot = _int4_dot(groups) if INT4_DOT else None
    return dot if dot is not None else Int4Packed(groups, tg)


def _int4_dot(groups: QuantGroups) -> PackedWeight | None:
    """furca's VNNI int4 layout (int4_dot.py) for fp16-exact groups of 32 (GGUF Q4_0 /
    Q4_1), where the CPU has AVX512_VNNI."""
    from furca.runtime.quant import int4_dot

    return int4_dot.Int4Dot.pack(groups) if int4_dot.vnni_available() else None


class Int4Packed(PackedWeight):
    def __init__(self, groups: QuantGroups, torch_group: int):
        n, k = groups.shape
        self.shape, self.group = (n, k), torch_group
        self.small_m, self.small_m_fp32 = INT4_SMALL_M, INT4_SMALL_M_FP32
        rep = groups.group // torch_group
        scale = groups.scale.repeat_interleave(rep, dim=1)
        zero = torch.zeros_like(scale) if groups.offset is None else groups.offset.repeat_interleave(rep, dim=1)
        q = groups.codes.to(torch.int32)
        if groups.signed:
            q = q + 8
        else:
            zero = zero + 8.0 * scale
        pad = -n % _ROW_BLOCK
        if pad:  # zero rows (q = 8, scale = zero = 0) fill the last block
            q = torch.cat([q, torch.full((pad, k), 8, dtype=torch.int32)])
            scale, zero = (torch.cat([t, t.new_zeros(pad, t.shape[1])]) for t in (scale, zero))
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
        # (K / group, N, 2) bf16: the op's qScaleAndZeros
        self.scale_zero = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size() + self.scale_zero.numel() * 2

    def _small(self, x: torch.Tensor) -> torch.Tensor:
        sz = self.scale_zero if x.dtype == torch.bfloat16 else self.scale_zero.float()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, self.group, sz)
        return y[:, :self.shape[0]] if y.shape[1] != self.shape[0] else y

    def _codes(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The unsigned codes q (0..15) as uint8 (N, K), or of ``rows`` only. The pack
        stores byte [b, k, d] = q[2h b + d, k] | q[2h b + d + h, k] << 4 (h = _ROW_BLOCK / 2)."""
        n, k = self.shape
        if rows is None:
            return _unpack_int4(self.packed, k, _ROW_BLOCK // 2)[:n]
        blocks = self.packed.view(-1, k, _ROW_BLOCK // 2)
        half = (rows % _ROW_BLOCK) >= _ROW_BLOCK // 2
        sel = blocks[rows // _ROW_BLOCK, :, rows % (_ROW_BLOCK // 2)]  # (len, K)
        return torch.where(half[:, None], sel >> 4, sel & 15)

    def _dequant(self, q: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        sz = self.scale_zero.float()
        scale, zero = sz[..., 0].t(), sz[..., 1].t()  # (N, K / group)
        if rows is not None:
            scale, zero = scale[rows], zero[rows]
        else:
            scale, zero = scale[:self.shape[0]], zero[:self.shape[0]]
        m, k = q.shape
        w = (q.to(torch.float32) - 8.0).view(m, -1, self.group) * scale[..., None] + zero[..., None]
        return w.view(m, k)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self._dequant(self._codes(), None).to(dtype)

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        kern = _kernels()
        if kern is None or dtype not in (torch.float32, torch.bfloat16):
            return self.dequantize(dtype)
        n, k = self.shape
        blocks = self.packed.view(-1, k, _ROW_BLOCK // 2).numpy()
        # the transposed weight (K, N padded): the pack's 64 rows of a column land contiguous
        out_t = _scratch((k, blocks.shape[0] * _ROW_BLOCK), dtype)
        _split_rows(kern.dequant_int4pack_cols, (blocks.shape[0], k * _ROW_BLOCK), blocks,
                    self.scale_zero.float().numpy(), out_t)
        return _as_torch(out_t)[:, :n].t()

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._dequant(self._codes(ids), ids)


class GroupInt8(PackedWeight):
    def __init__(self, groups: QuantGroups):
        self.shape = groups.shape
        self.small_m, self.small_m_fp32 = GROUP_INT8_SMALL_M, GROUP_INT8_SMALL_M_FP32
        self.groups = groups
        self.codes = groups.codes.contiguous().numpy()
        self.scale = groups.scale.contiguous().numpy()
        off = groups.offset
        self.offset = np.zeros((groups.shape[0], 0), np.float32) if off is None else off.contiguous().numpy()
        # int8 per output channel (rtn.quantize_int8): torch's int8 x bf16 kernel for a few bf16 rows
        # (the projections' decode; its output is bf16, so never the fp32 LM head's path)
        self.channel_scale = None
        if groups.signed and off is None and groups.group == groups.shape[1]:
            self.channel_scale = groups.scale[:, 0].to(torch.bfloat16)

    @property
    def nbytes(self) -> int:
        extra = 0 if self.channel_scale is None else self.channel_scale.numel() * 2
        return self.codes.nbytes + self.scale.nbytes + self.offset.nbytes + extra

    def _small(self, x: torch.Tensor) -> torch.Tensor:
        if self.channel_scale is not None and x.dtype == torch.bfloat16 and x.shape[0] <= INT8_CHANNEL_SMALL_M:
            return torch.ops.aten._weight_int8pack_mm(x, self.groups.codes, self.channel_scale)
        kern = _kernels()
        if kern is None:
            return F.linear(x, self._weight(x.dtype))
        xf = x.float().numpy()
        m, k = xf.shape
        xsum = xf.reshape(m, self.scale.shape[1], -1).sum(axis=2, dtype=np.float32)
        out = np.empty((m, self.shape[0]), np.float32)
        parts = _parts(self.shape)
        if parts > 1 and omp_team.available():
            team = kern.group_matmul_team_i8 if self.codes.dtype == np.int8 else kern.group_matmul_team_u8
            omp_team.run(team, np.array([0, 4 * parts, m, k, self.shape[0], self.scale.shape[1], self.offset.shape[1],
                                         xf.ctypes.data, xsum.ctypes.data, self.codes.ctypes.data,
                                         self.scale.ctypes.data, self.offset.ctypes.data, out.ctypes.data], np.int64))
        else:
            _split_rows(kern.group_matmul_rows, self.shape, xf, xsum, self.codes, self.scale, self.offset, out)
        return torch.from_numpy(out).to(x.dtype)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.groups.dequantize().to(dtype)

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        kern = _kernels()
        if kern is None or dtype not in (torch.float32, torch.bfloat16):
            return self.dequantize(dtype)
        out = _scratch(self.shape, dtype)
        _split_rows(kern.dequant_rows, self.shape, self.codes, self.scale, self.offset, out)
        return _as_torch(out)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.groups.take_rows(ids).dequantize()


def _scratch(shape: tuple[int, int], dtype: torch.dtype) -> np.ndarray:
    """An uninitialized (N, K) array for a dequantized weight: fp32, or uint16 for bf16
    bits. Up to _SCRATCH_BYTES it is a view of one buffer per thread, reused across
    calls (a fresh allocation of that size page-faults on every call, which costs about
    as much as the dequantization itself)."""
    np_dtype = np.dtype(np.float32 if dtype == torch.float32 else np.uint16)
    nbytes = shape[0] * shape[1] * np_dtype.itemsize
    if nbytes > _SCRATCH_BYTES:
        return np.empty(shape, np_dtype)
    buf = getattr(_LOCAL, "scratch", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _LOCAL.scratch = np.empty(nbytes, np.uint8)
    return buf[:nbytes].view(np_dtype).reshape(shape)


def _as_torch(out: np.ndarray) -> torch.Tensor:
    """A kernel's output: fp32, or uint16 holding bf16 bits."""
    t = torch.from_numpy(out)
    return t if out.dtype == np.float32 else t.view(torch.bfloat16)


def _kernels():
    if not _KERNELS:
        with _LOCK:
            if not _KERNELS:
                try:
                    from furca.runtime.quant import cpu_kernels
                except ImportError:  # numba missing: GroupInt8 dequantizes and calls F.linear
                    cpu_kernels = None
                _KERNELS.append(cpu_kernels)
    return _KERNELS[0]


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        with _LOCK:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1), thread_name_prefix="furca-quant"))
    return _POOL[0]


def _parts(shape: tuple[int, int]) -> int:
    """How many threads the work of ``shape`` = (N units, K weights a unit) is worth."""
    n, k = shape
    return max(1, min(torch.get_num_threads(), n * k // _MIN_WEIGHTS_PER_THREAD))


def _split_rows(fn, shape, *args) -> None:
    """Run ``fn(*args, lo, hi)`` over the units [0, N) of ``shape`` = (N units, K weights
    a unit) (weight rows, or the int4 pack's 64-row blocks) in contiguous runs, one per
    thread (torch.get_num_threads()), the first on the calling thread."""
    n = shape[0]
    parts = _parts(shape)
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_pool().submit(fn, *args, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    try:
        fn(*args, bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()
