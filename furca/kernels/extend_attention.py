"""Extend (prefill) attention over a cached prefix in the pool plus the new tokens.

    extend_attention(q, k, v, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices, scaling) -> out:
        for b in range(B):
            rows = range(qo_indptr[b], qo_indptr[b + 1])              # Q new tokens
            slots = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]         # P + Q slots, prefix first
            P = len(slots) - Q
            keys = cat([k_buf[slots[:P]], k[rows]])                    # (P + Q, KV, D); same for values
            s = q[rows] @ keys^T * scaling                             # per query head h, KV head h // G
            s[j, n] = -inf  where n > P + j                            # new token j sees 0 .. P + j
            out[rows] = s.softmax(-1) @ values

Shapes: ``q``/``out`` ``(T, H, D)``; ``k``/``v`` ``(T, KV, D)``: the new tokens' keys
and values (they may already be in the pool as well: only the prefix is read from
it); ``k_buf``/``v_buf`` ``(num_slots, KV, D)`` with any slot and head strides;
``qo_indptr``/``kv_indptr`` ``(B+1,)``; ``kv_indices`` int32/int64. A request may have
an empty prefix (plain prefill) or a single new token (decode): both are covered.

Grid ``(B, H, ceil(max_qo_len / BLOCK_M))``: program ``(b, h, m)`` takes ``BLOCK_M``
new tokens of request ``b`` and query head ``h``; stage 1 walks the prefix through
``kv_indices`` (gathered, no mask), stage 2 the new tokens' own K/V rows (contiguous,
causal, stopping at the diagonal), both with one online softmax in fp32. Dot products
run on the storage dtype (fp16/bf16 tensor cores; fp32 in exact "ieee" precision).
With an fp8 pool (``torch.float8_e4m3fn``; fp16 / bf16 queries) the dots run in q's
dtype: the prefix is upcast right after its load, and the new tokens' K/V are first
rounded as the pool stores them (``fp8.round_e4m3``: saturated, to nearest even), so
every key and value is the one a later decode step reads back. Compiled: sm_89+.

Memory traffic: per program, reads ``BLOCK_M * D`` of q, ``(P + min(Q, (m+1) *
BLOCK_M)) * D`` of each of K and V; across the grid K/V are read ``ceil(Q / BLOCK_M) *
G`` times (served largely from L2); writes ``T * H * D``. Compute: ``4 * H * D * Q * (P
+ Q / 2)`` FLOP per request: compute-bound for long extends.
"""

import math

import torch

from furca.kernels._triton import check, cuda_capability, require_triton, tl, triton
from furca.kernels.fp8 import round_e4m3, to_e4m3

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_POOL_DTYPES = _SUPPORTED + (torch.float8_e4m3fn,)


def _as_stored(x: torch.Tensor, pool_dtype: torch.dtype) -> torch.Tensor:
    """``x`` as the pool holds it, in fp32."""
    return (to_e4m3(x) if pool_dtype == torch.float8_e4m3fn else x.to(pool_dtype)).float()


def extend_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor,
                         v_buf: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor,
                         kv_indices: torch.Tensor, scaling: float) -> torch.Tensor:
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    qo, kvp = qo_indptr.tolist(), kv_indptr.tolist()
    for b in range(len(qo) - 1):
        q_len = qo[b + 1] - qo[b]
        if q_len == 0:
            continue
        slots = kv_indices[kvp[b]:kvp[b + 1]]
        prefix_len = len(slots) - q_len
        keys = torch.cat([k_buf[slots[:prefix_len]].float(), _as_stored(k[qo[b]:qo[b + 1]], k_buf.dtype)])
        values = torch.cat([v_buf[slots[:prefix_len]].float(), _as_stored(v[qo[b]:qo[b + 1]], v_buf.dtype)])
        keys = keys.repeat_interleave(group, dim=1)  # (S, H, D)
        values = values.repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,shd->hqs", q[qo[b]:qo[b + 1]].float(), keys) * scaling
        pos = torch.arange(prefix_len + q_len, device=q.device)
        s = s.masked_fill(pos[None, None, :] > (prefix_len + pos[:q_len])[None, :, None], float("-inf"))
        out[qo[b]:qo[b + 1]] = torch.einsum("hqs,shd->qhd", s.softmax(-1), values).to(q.dtype)
    return out


@triton.jit
def _extend_attention_kernel(
    q_ptr, k_ptr, v_ptr, k_buf_ptr, v_buf_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_indices_ptr, out_ptr,
    qk_scale,  # scaling * log2(e): the softmax runs in base 2
    stride_q_tok, stride_q_head, stride_k_tok, stride_k_head, stride_v_tok, stride_v_head,
    stride_buf_slot, stride_buf_head,
    stride_out_tok, stride_out_head,
    GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)
    qo_start = tl.load(qo_indptr_ptr + b).to(tl.int64)
    qo_len = (tl.load(qo_indptr_ptr + b + 1) - qo_start).to(tl.int32)
    if m_block * BLOCK_M < qo_len:
        kv_start = tl.load(kv_indptr_ptr + b).to(tl.int64)
        prefix_len = (tl.load(kv_indptr_ptr + b + 1) - kv_start).to(tl.int32) - qo_len
        kv_head = head // GROUP_SIZE
        if KV_FP8:  # the dots run in q's dtype; K/V are upcast after their load
            dtype = q_ptr.dtype.element_ty
        else:
            dtype = k_buf_ptr.dtype.element_ty
        offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = offs_m < qo_len
        mask_d = offs_d < HEAD_DIM
        rows = qo_start + offs_m
        q = tl.load(q_ptr + rows[:, None] * stride_q_tok + head * stride_q_head + offs_d[None, :],
                    mask=mask_m[:, None] & mask_d[None, :], other=0.0).to(dtype)  # (BLOCK_M, BLOCK_D)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

        # stage 1: the cached prefix, gathered from the pool; every query sees all of it
        buf_head = kv_head * stride_buf_head
        for start in range(0, prefix_len, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask_n = offs_n < prefix_len
            slots = tl.load(kv_indices_ptr + kv_start + offs_n, mask=mask_n, other=0).to(tl.int64)
            kv_off = slots[:, None] * stride_buf_slot + buf_head + offs_d[None, :]  # (BLOCK_N, BLOCK_D)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(k_buf_ptr + kv_off, mask=kv_mask, other=0.0).to(dtype)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
            qk = tl.where(mask_n[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            v = tl.load(v_buf_ptr + kv_off, mask=kv_mask, other=0.0).to(dtype)
            acc = acc * alpha[:, None] + tl.dot(p.to(dtype), v, input_precision=DOT_PRECISION)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new

        # stage 2: the new tokens themselves, contiguous rows, causal
        hi = tl.minimum(qo_len, (m_block + 1) * BLOCK_M)
        for start in range(0, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask_n = offs_n < qo_len
            new_rows = (qo_start + offs_n)[:, None]
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(k_ptr + new_rows * stride_k_tok + kv_head * stride_k_head + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            if KV_FP8:  # the key as the pool stores it
                k = round_e4m3(k)
            k = k.to(dtype)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
            qk = tl.where(mask_n[None, :] & (offs_n[None, :] <= offs_m[:, None]), qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            v = tl.load(v_ptr + new_rows * stride_v_tok + kv_head * stride_v_head + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            if KV_FP8:
                v = round_e4m3(v)
            v = v.to(dtype)
            acc = acc * alpha[:, None] + tl.dot(p.to(dtype), v, input_precision=DOT_PRECISION)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new

        out = acc / l_i[:, None]
        tl.store(out_ptr + rows[:, None] * stride_out_tok + head * stride_out_head + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])


def default_blocks(device: torch.device, head_dim: int, dtype: torch.dtype,
                   capability: tuple[int, int] | None = None) -> tuple[int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, num_warps, num_stages)``; ``capability``: the CUDA device's
    (None: asked of ``device``). On CUDA, fp32 tiles are smaller: exact fp32 dots run on
    FMA units, not tensor cores, and need far more registers (128x64 or 64x64 tiles
    spill kilobytes per thread on sm_80 and sm_90; ``python tools/cross_compile.py``
    checks every default). On sm_90+ 16-bit tiles are 128x128: on an H200
    (bench/results/gpu.md, 2026-12-04; 32 q / 8 KV heads, D 128, bf16) 128x128 at 8
    warps beat 128x64 at 8 warps by 12-21% on every shape measured (B4 x 4096 new: 2.01
    against 2.53 ms; 3072 cached + 1024 new: 1.25 against 1.42; B16 x 512 + 512: 0.51
    against 0.58), not yet re-run as the default; its up to 165 KB of shared memory
    (the cross-compile's figure, D 128) is over sm_80's 163 KB, so older GPUs keep 128x64."""
    if device.type == "cuda" and dtype == torch.float32:
        return 32, 32, 8, 2
    if device.type == "cuda" and head_dim <= 128:
        if capability is None:
            capability = cuda_capability(device)
        return (128, 128, 8, 2) if capability >= (9, 0) else (128, 64, 8, 2)
    return 64, 64, 4, 2 if head_dim <= 128 else 1


def extend_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
    qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, scaling: float, *,
    max_qo_len: int | None = None, out: torch.Tensor | None = None,
    block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """``out`` (T, H, D) in q's dtype; see the module docstring. ``max_qo_len``: the most
    new tokens of one request (host int; computed with a device sync when None).
    ``block_m``, ``block_n``, ``num_warps``, ``num_stages`` override the defaults."""
    require_triton()
    check(q.dim() == 3 and k.dim() == 3 and k.shape == v.shape and k_buf.dim() == 3 and k_buf.shape == v_buf.shape,
          f"want q (T, H, D), k/v (T, KV, D), k_buf/v_buf (num_slots, KV, D); got {tuple(q.shape)}, "
          f"{tuple(k.shape)}, {tuple(v.shape)}, {tuple(k_buf.shape)}, {tuple(v_buf.shape)}")
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_buf.shape[1]
    check(k.shape == (num_tokens, num_kv_heads, head_dim) and k_buf.shape[2] == head_dim,
          f"k/v must be ({num_tokens}, {num_kv_heads}, {head_dim}) and k_buf (..., {num_kv_heads}, {head_dim}); "
          f"got {tuple(k.shape)} and {tuple(k_buf.shape)}")
    check(num_heads % num_kv_heads == 0, f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    check(q.dtype in _SUPPORTED and k.dtype in _SUPPORTED and k_buf.dtype in _POOL_DTYPES,
          f"unsupported dtypes {q.dtype}, {k.dtype}, {k_buf.dtype}")
    check(k.dtype == v.dtype, f"k and v dtypes differ: {k.dtype} vs {v.dtype}")
    check(k_buf.dtype == v_buf.dtype and k_buf.stride() == v_buf.stride(),
          "k_buf and v_buf must have the same dtype and strides")
    check(all(t.stride(2) == 1 for t in (q, k, v, k_buf)), "the head_dim axis must be contiguous (stride 1)")
    check(qo_indptr.shape == kv_indptr.shape and qo_indptr.dim() == 1,
          f"qo_indptr and kv_indptr must both be (B+1,), got {tuple(qo_indptr.shape)}, {tuple(kv_indptr.shape)}")
    for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        check(t.dtype in (torch.int32, torch.int64) and t.is_contiguous(), f"{name} must be contiguous int32/int64")
    check(all(t.device == q.device for t in (k, v, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices)),
          "all tensors must be on one device")
    if out is None:
        out = torch.empty_like(q)
    check(out.shape == q.shape and out.stride(2) == 1, f"out must be {tuple(q.shape)} with a contiguous last axis")
    batch = qo_indptr.shape[0] - 1
    if max_qo_len is None:
        max_qo_len = int((qo_indptr[1:] - qo_indptr[:-1]).max()) if batch > 0 else 0
    if batch == 0 or max_qo_len == 0:
        return out
    kv_fp8 = k_buf.dtype == torch.float8_e4m3fn
    check(not kv_fp8 or q.dtype in (torch.float16, torch.bfloat16),
          f"an fp8 (e4m3) pool is read with fp16 or bf16 queries, got {q.dtype}")
    compute = q.dtype if kv_fp8 else k_buf.dtype  # the dots' operand dtype
    bm, bn, warps, stages = default_blocks(q.device, head_dim, compute)
    block_m, block_n = block_m or bm, block_n or bn
    _extend_attention_kernel[(batch, num_heads, triton.cdiv(max_qo_len, block_m))](
        q, k, v, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices, out,
        scaling * math.log2(math.e),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_buf.stride(0), k_buf.stride(1),
        out.stride(0), out.stride(1),
        GROUP_SIZE=num_heads // num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        DOT_PRECISION="ieee" if compute == torch.float32 else "tf32", KV_FP8=kv_fp8,
        num_warps=num_warps or warps, num_stages=num_stages or stages,
    )
    return out
