"""Weight-only quantized matmul: dequantize the weight tile in registers, then ``tl.dot``.

    int4_matmul(x, packed) / int8_matmul(x, packed) / fp8_matmul(x, packed) -> out:
        w = dequantize(packed)                       # (N, K) fp32, see dequant_pack
        out = (x.float() @ w.T).to(x.dtype)          # (M, N)

``x``: ``(M, K)`` fp16 / bf16 / fp32, any strides; ``packed``: a ``PackedWeight`` from
``pack_int4`` / ``pack_int8`` (a ``QuantGroups``) or ``pack_fp8(*quantize_fp8(w))``, on
x's device; ``out``: ``(M, N)`` contiguous in x's dtype, accumulated in fp32. These are
the calls a quantized linear makes on CUDA (bias, if any, added by the caller):

    int4_matmul(x, pack_int4(groups).to("cuda"))     # group 32 / 64 / 128, with or without zeros
    int8_matmul(x, pack_int8(groups).to("cuda"))     # per-channel, or group 16 / 32 / 64 / 128
    fp8_matmul(x, pack_fp8(*quantize_fp8(w)).to("cuda"))   # needs sm_89+ on a GPU

``*_ref`` is the specification in plain torch (any device). Each launcher also takes
``block_m``, ``block_n``, ``block_k``, ``num_warps``, ``num_stages`` and ``split_k``
overrides (the GPU bench sweeps them).

Grid ``(ceil(M / BLOCK_M), ceil(N / BLOCK_N), split_k)``. A program walks its share of
K in ``BLOCK_K`` tiles; ``BLOCK_K`` divides the group, so one scale (and zero) row
serves a tile and is applied after the dot, which runs on the exact integer (or fp8)
codes in x's dtype:

    acc += dot(x_tile, codes_tile) * scale[g] + rowsum(x_tile) * zero[g]

(codes up to 255 and every e4m3 value are exact in fp16 and bf16: the only roundings
are x's own and fp32 accumulation, and the tile costs one convert per weight instead
of a convert and an FMA). K, M and N tails are masked (K is arbitrary for per-channel
int8 and fp8). With ``split_k > 1`` each split writes fp32 partial sums to a
``(split_k, M, N)`` workspace that torch sums: at M = 1 on a large GPU there are too
few (M, N) tiles to keep every SM streaming weights.

Memory traffic: the weight once per M-tile (int4 ``N * K / 2`` bytes, int8 / fp8 ``N *
K``, plus ``N * K / group`` scales and zeros of 2 or 4 bytes); x ``M * K`` elements per
N-tile (from L2); out ``M * N`` (with split-K, ``4 * split_k * M * N`` more). At
decode (M <= 16) that is the weight bytes: the kernel is bandwidth-bound, and int4
moves about a quarter of bf16's bytes.
"""

import torch

from furca.kernels._triton import check, cuda_capability, cuda_properties, require_triton, tl, triton
from furca.kernels.dequant_pack import (  # noqa: F401 - the packing API, re-exported
    FP8_MAX, INT4_GROUPS, INT8_GROUPS, PackedWeight, dequantize, pack_fp8, pack_int4, pack_int8, quantize_fp8)

_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_KIND_ID = {"int4": 0, "int8": 1, "fp8": 2}


def _matmul_ref(x: torch.Tensor, packed: PackedWeight, kind: str) -> torch.Tensor:
    check(packed.kind == kind, f"{kind}_matmul_ref needs a {kind} PackedWeight, got {packed.kind}")
    w = dequantize(packed).to(x.device)
    return torch.nn.functional.linear(x.to(torch.float32), w).to(x.dtype)


def int4_matmul_ref(x: torch.Tensor, packed: PackedWeight) -> torch.Tensor:
    return _matmul_ref(x, packed, "int4")


def int8_matmul_ref(x: torch.Tensor, packed: PackedWeight) -> torch.Tensor:
    return _matmul_ref(x, packed, "int8")


def fp8_matmul_ref(x: torch.Tensor, packed: PackedWeight) -> torch.Tensor:
    return _matmul_ref(x, packed, "fp8")


@triton.jit
def _dequant_matmul_kernel(
    x_ptr, w_ptr, scale_ptr, zero_ptr, out_ptr,
    M, N, K, group, k_per_split,
    stride_xm, stride_xk, stride_wk, stride_sg, stride_om, stride_split,
    KIND: tl.constexpr, BIAS: tl.constexpr, HAS_ZERO: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m, pid_n, pid_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m, mask_n = offs_m < M, offs_n < N
    x_rows = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_begin = pid_s * k_per_split
    k_end = tl.minimum(K, k_begin + k_per_split)
    for k0 in range(k_begin, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        x = tl.load(x_rows + offs_k[None, :] * stride_xk, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        mask_w = mask_k[:, None] & mask_n[None, :]
        if KIND == 0:  # 8 codes per int32 along K
            words = tl.load(w_ptr + (offs_k[:, None] // 8).to(tl.int64) * stride_wk + offs_n[None, :],
                            mask=mask_w, other=0)
            codes = ((words >> ((offs_k[:, None] % 8) * 4)) & 0xF) + BIAS
        elif KIND == 1:
            codes = tl.load(w_ptr + offs_k[:, None].to(tl.int64) * stride_wk + offs_n[None, :], mask=mask_w,
                            other=0).to(tl.int32) + BIAS
        else:
            codes = tl.load(w_ptr + offs_k[:, None].to(tl.int64) * stride_wk + offs_n[None, :], mask=mask_w,
                            other=0.0)
        part = tl.dot(x, codes.to(x.dtype), input_precision=DOT_PRECISION)  # exact codes, fp32 sums
        g = k0 // group  # BLOCK_K divides the group: one scale row per tile
        scale = tl.load(scale_ptr + g * stride_sg + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        acc += part * scale[None, :]
        if HAS_ZERO:
            zero = tl.load(zero_ptr + g * stride_sg + offs_n, mask=mask_n, other=0.0).to(tl.float32)
            acc += tl.sum(x.to(tl.float32), 1)[:, None] * zero[None, :]
    out = out_ptr + pid_s.to(tl.int64) * stride_split + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def default_blocks(m: int, n: int, k: int, group: int, dtype: torch.dtype, num_sms: int | None):
    """``(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, split_k)`` for a GPU with
    ``num_sms`` SMs (None: the interpreter, no split). Decode (M <= 16) takes 16-row
    tiles and splits K until the grid covers the SMs twice; fp32 takes small tiles
    (exact fp32 dots run on FMA units and need far more registers)."""
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    # K tiles of 128 at 64 rows reach 255 registers on sm_80: prefill tiles take 64
    block_n, block_k, warps, stages = (64, 128, 4, 4) if m <= 16 else (64, 64, 4, 3)
    if dtype == torch.float32:
        block_m, block_n, block_k, stages = min(block_m, 32), 32, 32, 2
    block_k = min(block_k, max(16, triton.next_power_of_2(k)))
    if group != k:  # group-wise: a tile never straddles two groups
        block_k = min(block_k, group)
    split = 1
    if num_sms and m <= 16:
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        k_tiles = triton.cdiv(k, block_k)
        split = max(1, min(2 * num_sms // tiles, k_tiles // 4, 16))
    return block_m, block_n, block_k, warps, stages, split


def _launch(kind: str, x: torch.Tensor, packed: PackedWeight, block_m=None, block_n=None, block_k=None,
            num_warps=None, num_stages=None, split_k=None) -> torch.Tensor:
    require_triton()
    check(isinstance(packed, PackedWeight) and packed.kind == kind,
          f"{kind}_matmul needs a {kind} PackedWeight (pack_{kind}), got "
          f"{packed.kind if isinstance(packed, PackedWeight) else type(packed).__name__}")
    check(x.dim() == 2 and x.dtype in _X_DTYPES, f"x must be an fp16/bf16/fp32 (M, K) tensor, got {x.dtype} "
          f"{tuple(x.shape)}")
    m, n, k = x.shape[0], packed.n, packed.k
    check(x.shape[1] == k, f"x has K = {x.shape[1]}, the {kind} weight ({n}, {k}) has K = {k}")
    tensors = [t for t in (packed.qweight, packed.scale, packed.zero) if t is not None]
    check(all(t.device == x.device for t in tensors), f"x is on {x.device}, the packed weight on {packed.qweight.device}")
    check(all(t.stride(-1) == 1 for t in tensors), "the packed tensors must have a contiguous N axis")
    check(packed.zero is None or packed.zero.stride() == packed.scale.stride(), "scale and zero strides differ")
    if kind == "fp8" and x.device.type == "cuda":
        check(cuda_capability(x.device) >= (8, 9),
              f"fp8 (e4m3) weights need an sm_89+ GPU; {torch.cuda.get_device_name(x.device)} is older: use int8")
    out = torch.empty((m, n), device=x.device, dtype=x.dtype)
    if m == 0 or n == 0:
        return out
    props = cuda_properties(x.device)
    sms = props.multi_processor_count if props is not None else None
    bm, bn, bk, warps, stages, split = default_blocks(m, n, k, packed.group, x.dtype, sms)
    bm, bn, bk = block_m or bm, block_n or bn, block_k or bk
    check(packed.group % bk == 0 or packed.group == k, f"block_k {bk} must divide the group {packed.group}")
    check(bk >= 16 and bk & (bk - 1) == 0, f"block_k must be a power of two >= 16, got {bk}")
    k_tiles = triton.cdiv(k, bk)
    per_split = triton.cdiv(k_tiles, max(1, min(split_k or split, k_tiles)))
    split = triton.cdiv(k_tiles, per_split)
    dest = out if split == 1 else torch.empty((split, m, n), device=x.device, dtype=torch.float32)
    _dequant_matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn), split)](
        x, packed.qweight, packed.scale, packed.scale if packed.zero is None else packed.zero, dest,
        m, n, k, packed.group, per_split * bk,
        x.stride(0), x.stride(1), packed.qweight.stride(0), packed.scale.stride(0), n,
        0 if split == 1 else m * n,
        KIND=_KIND_ID[kind], BIAS=packed.bias, HAS_ZERO=packed.zero is not None,
        DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=num_warps or warps, num_stages=num_stages or stages,
    )
    return out if split == 1 else dest.sum(0).to(x.dtype)


def int4_matmul(x: torch.Tensor, packed: PackedWeight, **blocks) -> torch.Tensor:
    """``x @ w.T`` for a ``pack_int4`` weight; see the module docstring."""
    return _launch("int4", x, packed, **blocks)


def int8_matmul(x: torch.Tensor, packed: PackedWeight, **blocks) -> torch.Tensor:
    """``x @ w.T`` for a ``pack_int8`` weight; see the module docstring."""
    return _launch("int8", x, packed, **blocks)


def fp8_matmul(x: torch.Tensor, packed: PackedWeight, **blocks) -> torch.Tensor:
    """``x @ w.T`` for a ``pack_fp8`` weight (compiled: sm_89 or newer); see the module docstring."""
    return _launch("fp8", x, packed, **blocks)
