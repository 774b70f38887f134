"""Paged decode attention: one query token per request against its KV slots in the pool.

    decode_attention(q, k_buf, v_buf, kv_indptr, kv_indices, scaling) -> out:
        for b in range(B):
            slots = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]          # (L,)
            k = k_buf[slots].repeat_interleave(G, dim=1)               # (L, H, D), G = H // KV
            v = v_buf[slots].repeat_interleave(G, dim=1)
            s = torch.einsum("hd,lhd->hl", q[b].float(), k.float()) * scaling
            out[b] = torch.einsum("hl,lhd->hd", s.softmax(-1), v.float())

Shapes: ``q``/``out`` ``(B, H, D)``; ``k_buf``/``v_buf`` ``(num_slots, KV, D)`` with any
slot and head strides (``KVCache.k[layer]``); ``kv_indptr`` ``(B+1,)`` and
``kv_indices`` int32/int64. Every request has at least one KV slot.

Split-KV (flash-decoding), two launches:
  stage 1, grid ``(B, KV, S)``: program ``(b, kh, s)`` takes the ``s``-th of ``S``
  equal parts of request ``b``'s slots, and the ``G`` query heads of KV head ``kh``
  together (one K/V tile load serves all ``G``: the tile is read once per KV head, not
  per query head); it loops over ``BLOCK_N`` slots at a time with an online softmax and
  writes the partial output and its log-sum-exp (base 2) to fp32 scratch;
  stage 2, grid ``(B, H)``: merges the ``S`` partial results by log-sum-exp.
``S`` is a runtime argument, not a constexpr: the split count follows the batch size
and the longest context, and one compiled kernel serves them all (no JIT stall when a
new batch size shows up mid-serving).
Dot products run on the storage dtype (fp16/bf16 on tensor cores, fp32 with exact
"ieee" precision) and accumulate in fp32; softmax, rescaling and merging are fp32.
An fp8 pool (``torch.float8_e4m3fn``, 1 byte per element) is read with fp16 / bf16
queries: each K/V tile is upcast to q's dtype right after its load (exact: every e4m3
value is an fp16 and a bf16 value) and the dots run in q's dtype, never fp8 x fp8.
Compiled, that needs sm_89 or newer.

Memory traffic: reads each request's K and V once per KV head, ``2 * sum(L) * KV * D``
elements, plus ``sum(L)`` indices and q; writes ``B * H * S * (D + 1)`` fp32 partials
that stage 2 reads back, and ``B * H * D`` outputs. For ``S * (D + 1) * 4 << 2 * L *
D * elt / G`` bytes per head the K/V read is all that counts.
"""

import math

import torch

from furca.kernels._triton import check, cuda_capability, cuda_properties, require_triton, tl, triton

_SUPPORTED = (torch.float16, torch.bfloat16, torch.float32)
_POOL_DTYPES = _SUPPORTED + (torch.float8_e4m3fn,)


def decode_attention_ref(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor,
                         kv_indptr: torch.Tensor, kv_indices: torch.Tensor, scaling: float) -> torch.Tensor:
    num_heads, num_kv_heads = q.shape[1], k_buf.shape[1]
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    bounds = kv_indptr.tolist()
    for b in range(q.shape[0]):
        slots = kv_indices[bounds[b]:bounds[b + 1]]
        k = k_buf[slots].float().repeat_interleave(group, dim=1)  # (L, H, D)
        v = v_buf[slots].float().repeat_interleave(group, dim=1)
        s = torch.einsum("hd,lhd->hl", q[b].float(), k) * scaling
        out[b] = torch.einsum("hl,lhd->hd", s.softmax(-1), v).to(q.dtype)
    return out


@triton.jit
def _decode_stage1_kernel(
    q_ptr, k_buf_ptr, v_buf_ptr, kv_indptr_ptr, kv_indices_ptr, mid_o_ptr, mid_lse_ptr,
    qk_scale,  # scaling * log2(e): the softmax runs in base 2
    num_kv_splits,  # a runtime value: one compiled kernel serves every split count
    stride_q_tok, stride_q_head, stride_buf_slot, stride_buf_head,
    GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if KV_FP8:  # upcast after the load: the dots run in q's dtype
        dtype = q_ptr.dtype.element_ty
    else:
        dtype = k_buf_ptr.dtype.element_ty
    num_heads = tl.num_programs(1) * GROUP_SIZE
    kv_start = tl.load(kv_indptr_ptr + b).to(tl.int64)
    seq_len = (tl.load(kv_indptr_ptr + b + 1) - kv_start).to(tl.int32)
    split_len = tl.cdiv(seq_len, num_kv_splits)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, seq_len)
    if hi > lo:
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        mask_h = offs_h < GROUP_SIZE
        mask_d = offs_d < HEAD_DIM
        heads = kv_head * GROUP_SIZE + offs_h
        q = tl.load(q_ptr + b.to(tl.int64) * stride_q_tok + heads[:, None] * stride_q_head + offs_d[None, :],
                    mask=mask_h[:, None] & mask_d[None, :], other=0.0)
        q = q.to(dtype)  # (BLOCK_H, BLOCK_D), the dot's operand type
        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        head_off = kv_head * stride_buf_head
        for start in range(lo, hi, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            mask_n = offs_n < hi
            slots = tl.load(kv_indices_ptr + kv_start + offs_n, mask=mask_n, other=0).to(tl.int64)
            kv_off = slots[:, None] * stride_buf_slot + head_off + offs_d[None, :]  # (BLOCK_N, BLOCK_D)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(k_buf_ptr + kv_off, mask=kv_mask, other=0.0).to(dtype)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_H, BLOCK_N)
            qk = tl.where(mask_n[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            v = tl.load(v_buf_ptr + kv_off, mask=kv_mask, other=0.0).to(dtype)
            acc = acc * alpha[:, None] + tl.dot(p.to(dtype), v, input_precision=DOT_PRECISION)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        row = (b * num_heads + heads).to(tl.int64) * num_kv_splits + split  # (B, H, S) index
        tl.store(mid_o_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc / l_i[:, None],
                 mask=mask_h[:, None] & mask_d[None, :])
        tl.store(mid_lse_ptr + row, m_i + tl.log2(l_i), mask=mask_h)


@triton.jit
def _decode_stage2_kernel(
    mid_o_ptr, mid_lse_ptr, out_ptr, kv_indptr_ptr,
    num_kv_splits, stride_out_tok, stride_out_head,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    head = tl.program_id(1)
    num_heads = tl.num_programs(1)
    seq_len = (tl.load(kv_indptr_ptr + b + 1) - tl.load(kv_indptr_ptr + b)).to(tl.int32)
    split_len = tl.cdiv(seq_len, num_kv_splits)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    base = (b * num_heads + head).to(tl.int64) * num_kv_splits
    m = float("-inf")
    total = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for split in range(num_kv_splits):
        if split * split_len < seq_len:  # empty splits wrote nothing
            o = tl.load(mid_o_ptr + (base + split) * HEAD_DIM + offs_d, mask=mask_d, other=0.0)
            lse = tl.load(mid_lse_ptr + base + split)
            m_new = tl.maximum(m, lse)
            alpha = tl.exp2(m - m_new)
            w = tl.exp2(lse - m_new)
            acc = acc * alpha + w * o
            total = total * alpha + w
            m = m_new
    out = acc / total
    tl.store(out_ptr + b.to(tl.int64) * stride_out_tok + head * stride_out_head + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=mask_d)


def default_num_kv_splits(batch_size: int, num_kv_heads: int, max_seq_len: int | None,
                          device: torch.device) -> int:
    """Enough stage-1 programs to fill the GPU about 8 times over, and at least 256
    slots per split."""
    props = cuda_properties(device)
    num_sms = props.multi_processor_count if props is not None else 4
    splits = triton.cdiv(8 * num_sms, batch_size * num_kv_heads)
    if max_seq_len is not None:
        splits = min(splits, triton.cdiv(max_seq_len, 256))
    return max(1, min(splits, 64))


def default_num_stages(kv_element_size: int, capability: tuple[int, int] | None) -> int:
    """Software-pipeline depth of stage 1's K/V loads for a pool of ``kv_element_size``
    bytes on a GPU of compute ``capability`` (None: not CUDA): 3 for 16-bit pools on
    Hopper (sm_90) and newer, 2 elsewhere. Measured on an H200 (bench/gpu_check.sh,
    2026-12-04; batch 64, context 4096, 32 q / 8 KV heads, D 128, bf16): 3 stages moved
    88-97% of the copy bandwidth at every split count swept (1-16), 2 stages 70-90%
    (76% with the default splits, 3 there). fp8 pools were not swept and keep 2; fp32
    pools keep 2 (three stages of fp32 tiles outgrow smaller GPUs' shared memory; fp32
    is the CPU path)."""
    if capability is None or kv_element_size != 2:
        return 2
    return 3 if capability >= (9, 0) else 2


def decode_attention(
    q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor, scaling: float, *, out: torch.Tensor | None = None,
    max_seq_len: int | None = None, num_kv_splits: int | None = None,
    block_n: int | None = None, num_warps: int | None = None, num_stages: int | None = None,
) -> torch.Tensor:
    """``out`` (B, H, D) in q's dtype; see the module docstring. ``max_seq_len`` (host
    int, optional) only bounds the number of splits; ``num_kv_splits``, ``block_n``,
    ``num_warps``, ``num_stages`` override the tuning defaults (benchmarks)."""
    require_triton()
    check(q.dim() == 3 and k_buf.dim() == 3 and k_buf.shape == v_buf.shape,
          f"want q (B, H, D) and k_buf/v_buf (num_slots, KV, D); got {tuple(q.shape)}, "
          f"{tuple(k_buf.shape)}, {tuple(v_buf.shape)}")
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_buf.shape[1]
    check(k_buf.shape[2] == head_dim, f"head_dim differs: q has {head_dim}, k_buf {k_buf.shape[2]}")
    check(num_heads % num_kv_heads == 0, f"num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    check(q.dtype in _SUPPORTED and k_buf.dtype in _POOL_DTYPES, f"unsupported dtypes {q.dtype}, {k_buf.dtype}")
    check(k_buf.dtype == v_buf.dtype and k_buf.stride() == v_buf.stride(),
          "k_buf and v_buf must have the same dtype and strides")
    check(q.stride(2) == 1 and k_buf.stride(2) == 1, "the head_dim axis must be contiguous (stride 1)")
    check(kv_indptr.dim() == 1 and kv_indptr.shape[0] == batch + 1,
          f"kv_indptr must be (B+1,) = ({batch + 1},), got {tuple(kv_indptr.shape)}")
    for name, t in (("kv_indptr", kv_indptr), ("kv_indices", kv_indices)):
        check(t.dtype in (torch.int32, torch.int64) and t.is_contiguous(), f"{name} must be contiguous int32/int64")
    check(all(t.device == q.device for t in (k_buf, v_buf, kv_indptr, kv_indices)), "all tensors must be on one device")
    if out is None:
        out = torch.empty_like(q)
    check(out.shape == q.shape and out.stride(2) == 1, f"out must be {tuple(q.shape)} with a contiguous last axis")
    if batch == 0:
        return out
    group = num_heads // num_kv_heads
    kv_fp8 = k_buf.dtype == torch.float8_e4m3fn
    check(not kv_fp8 or q.dtype in (torch.float16, torch.bfloat16),
          f"an fp8 (e4m3) pool is read with fp16 or bf16 queries, got {q.dtype}")
    compute = q.dtype if kv_fp8 else k_buf.dtype  # the dots' operand dtype
    splits = num_kv_splits or default_num_kv_splits(batch, num_kv_heads, max_seq_len, q.device)
    block_d = max(16, triton.next_power_of_2(head_dim))  # tl.dot needs K >= 16
    mid_o = torch.empty((batch, num_heads, splits, head_dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((batch, num_heads, splits), dtype=torch.float32, device=q.device)
    _decode_stage1_kernel[(batch, num_kv_heads, splits)](
        q, k_buf, v_buf, kv_indptr, kv_indices, mid_o, mid_lse,
        scaling * math.log2(math.e), splits,
        q.stride(0), q.stride(1), k_buf.stride(0), k_buf.stride(1),
        GROUP_SIZE=group, HEAD_DIM=head_dim,
        BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n or 64, BLOCK_D=block_d,
        DOT_PRECISION="ieee" if compute == torch.float32 else "tf32", KV_FP8=kv_fp8,
        # fp32 dots run on FMA units: at 4 warps a D=128 tile needs 255 registers and spills
        num_warps=num_warps or (8 if compute == torch.float32 else 4),
        num_stages=num_stages or default_num_stages(k_buf.element_size(), cuda_capability(q.device)),
    )
    _decode_stage2_kernel[(batch, num_heads)](
        mid_o, mid_lse, out, kv_indptr, splits, out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=block_d, num_warps=4 if head_dim <= 128 else 8,
    )
    return out
