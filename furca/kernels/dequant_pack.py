"""CUDA compute layouts of quantized weights, for ``dequant_matmul``'s kernels.

Every layout is K-major with N contiguous (``w^T``), so a kernel tile ``(BLOCK_K,
BLOCK_N)`` is ``BLOCK_K`` coalesced row segments, and one scale row serves a tile:

    int4  qweight (K // 8, N) int32: code (n, k) in bits 4 * (k % 8) of qweight[k // 8, n],
                                     stored unsigned 0..15 (signed codes -8..7 stored + 8)
    int8  qweight (K, N) int8:       unsigned codes 0..255 stored - 128
    fp8   qweight (K, N) float8_e4m3fn
    scale (K // group, N), zero (K // group, N) or None; per-channel: group = K, one row

    w[n, k] = scale[k // group, n] * (stored[k, n] + bias) + zero[k // group, n]

``bias`` undoes the storage shift (int4: -8 for signed codes; int8: +128 for unsigned
ones), so the codes, scales and offsets of a ``QuantGroups`` come back exactly.
Scales and zeros are fp16 when that is lossless (GGUF's fp16 ``d``/``m`` always are),
which halves their bytes (int4 group 32: 4.5 bits a weight with fp16 ``d`` alone, 5
with ``d`` and ``m``, against 6 in fp32), and fp32 otherwise (an RTN or K-quant
scale rarely fits fp16 exactly); ``scale_dtype=`` forces one.

The pack functions take any object with a ``QuantGroups``' fields (``codes``,
``scale``, ``offset``, ``group``, ``bits``): ``furca.kernels`` imports nothing of
the runtime. Packing runs on the groups' device (the CPU) and ``PackedWeight.to``
moves the result.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from furca.kernels._triton import check

INT4_GROUPS = (32, 64, 128)
INT8_GROUPS = (16, 32, 64, 128)  # 16: Q6_K's sub-blocks; per-channel (group == K) too
FP8_MAX = 448.0  # largest finite float8_e4m3fn


@dataclass(frozen=True)
class PackedWeight:
    """A quantized (N, K) weight in a kernel layout (see the module docstring)."""

    kind: str  # "int4", "int8" or "fp8"
    qweight: torch.Tensor
    scale: torch.Tensor  # (K // group, N) fp16 / fp32
    zero: torch.Tensor | None  # like scale, or None: symmetric
    group: int  # weights per scale along K; K for one scale per output channel
    bias: int  # added to the stored code before scaling
    n: int
    k: int

    def __post_init__(self):
        rows = self.k // 8 if self.kind == "int4" else self.k
        check(tuple(self.qweight.shape) == (rows, self.n), f"{self.kind} qweight must be ({rows}, {self.n}), "
              f"got {tuple(self.qweight.shape)}")
        want = (self.k // self.group, self.n)
        for name in ("scale", "zero"):
            t = getattr(self, name)
            check(t is None or (tuple(t.shape) == want and t.dtype in (torch.float16, torch.float32)),
                  f"{name} must be fp16/fp32 of shape {want}, got {None if t is None else (t.dtype, tuple(t.shape))}")

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scale, self.zero) if t is not None)

    def to(self, device) -> "PackedWeight":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(self, qweight=move(self.qweight), scale=move(self.scale), zero=move(self.zero))


def _scales(groups, scale_dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """scale / offset transposed to (K // group, N), fp16 where that is exact (or forced)."""
    pair = [t for t in (groups.scale, groups.offset) if t is not None]
    if scale_dtype is None:
        exact = all(torch.equal(t.to(torch.float16).to(torch.float32), t) for t in pair)
        scale_dtype = torch.float16 if exact else torch.float32
    check(scale_dtype in (torch.float16, torch.float32), f"scale_dtype must be fp16 or fp32, got {scale_dtype}")
    out = [t.t().contiguous().to(scale_dtype) for t in pair]
    return out[0], (out[1] if groups.offset is not None else None)


def _check_groups(groups, kind: str, max_bits: int, allowed: tuple[int, ...], per_channel: bool):
    n, k = groups.codes.shape
    check(groups.bits <= max_bits, f"{kind} packing takes codes of at most {max_bits} bits, got {groups.bits}")
    check(groups.group in allowed or (per_channel and groups.group == k),
          f"{kind} kernels support group sizes {allowed}{' or one group per row' if per_channel else ''}, "
          f"got group {groups.group} (K = {k})")
    return n, k, groups.codes.dtype == torch.int8


def pack_int4(groups, *, scale_dtype: torch.dtype | None = None) -> PackedWeight:
    """A 4-bit ``QuantGroups`` (uint8 codes 0..15, or int8 codes -8..7) as 8 codes per
    int32 along K; group sizes ``INT4_GROUPS``."""
    n, k, signed = _check_groups(groups, "int4", 4, INT4_GROUPS, per_channel=False)
    bias = -8 if signed else 0
    stored = groups.codes.to(torch.int64) - bias
    check(bool(((stored >= 0) & (stored <= 15)).all()), f"int4 codes must lie in {'-8..7' if signed else '0..15'}")
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=stored.device)
    words = (stored.view(n, k // 8, 8) << shifts).sum(-1)  # 0 .. 2^32 - 1
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    scale, zero = _scales(groups, scale_dtype)
    return PackedWeight("int4", words.t().contiguous(), scale, zero, groups.group, bias, n, k)


def pack_int8(groups, *, scale_dtype: torch.dtype | None = None) -> PackedWeight:
    """An up-to-8-bit ``QuantGroups`` (int8 codes, e.g. Q8_0 / Q6_K / per-channel int8;
    or uint8 codes with offsets, e.g. Q5_K) as one int8 per weight; group sizes
    ``INT8_GROUPS`` or one group per row (per output channel)."""
    n, k, signed = _check_groups(groups, "int8", 8, INT8_GROUPS, per_channel=True)
    bias = 0 if signed else 128
    stored = (groups.codes.to(torch.int16) - bias).to(torch.int8)
    scale, zero = _scales(groups, scale_dtype)
    return PackedWeight("int8", stored.t().contiguous(), scale, zero, groups.group, bias, n, k)


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes float8_e4m3fn (N, K), scale fp32 (N,))`` with ``w ~= scale[:, None] * codes``:
    each row's absolute maximum maps to 448, e4m3's largest finite value."""
    check(w.dim() == 2 and w.dtype.is_floating_point, f"w must be a float (N, K) tensor, got {w.dtype} "
          f"{tuple(w.shape)}")
    w = w.to(torch.float32)
    scale = w.abs().amax(1).clamp_min(1e-12) / FP8_MAX
    codes = (w / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, scale


def pack_fp8(codes: torch.Tensor, scale: torch.Tensor) -> PackedWeight:
    """``quantize_fp8``'s output as a kernel layout (one scale per output channel)."""
    check(codes.dtype == torch.float8_e4m3fn and codes.dim() == 2,
          f"codes must be float8_e4m3fn (N, K), got {codes.dtype} {tuple(codes.shape)}")
    n, k = codes.shape
    check(scale.shape == (n,) and scale.dtype == torch.float32, f"scale must be fp32 ({n},), got {scale.dtype} "
          f"{tuple(scale.shape)}")
    return PackedWeight("fp8", codes.t().contiguous(), scale.view(1, n).contiguous(), None, k, 0, n, k)


def stored_codes(packed: PackedWeight) -> torch.Tensor:
    """The (N, K) codes with the bias added back (fp32: exact for every kind)."""
    q = packed.qweight
    if packed.kind == "int4":
        shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=q.device)
        q = ((q.t()[..., None] >> shifts) & 0xF).reshape(packed.n, packed.k)
    else:
        q = q.t()
    return q.to(torch.float32).contiguous() + packed.bias  # row-major, as F.linear's weight


def dequantize(packed: PackedWeight) -> torch.Tensor:
    """The fp32 (N, K) weight, computed as ``QuantGroups.dequantize`` does (a product,
    then a sum), so a lossless packing dequantizes bit-exactly as its groups."""
    n, k, g = packed.n, packed.k, packed.group
    w = stored_codes(packed).view(n, k // g, g) * packed.scale.t().to(torch.float32)[..., None]
    if packed.zero is not None:
        w = w + packed.zero.t().to(torch.float32)[..., None]
    return w.view(n, k)
