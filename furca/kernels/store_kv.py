"""Scatter new K and V rows into their KV-pool slots.

    store_kv(k_buf, v_buf, loc, k, v):
        k_buf[loc[t]] = k[t].to(k_buf.dtype)      # for t in range(T)
        v_buf[loc[t]] = v[t].to(v_buf.dtype)

``k_buf``/``v_buf``: ``(num_slots, num_kv_heads, head_dim)``, any slot and head
strides (the runtime passes ``KVCache.k[layer]``, a slot-major view of its head-major
buffer), last dim contiguous. ``k``/``v``: ``(T, num_kv_heads, head_dim)``; ``loc``:
``(T,)`` int32/int64 slot indices, distinct (with duplicates the winner is unspecified).
An fp8 pool (``torch.float8_e4m3fn``) gets ``fp8.to_e4m3(k)``: values saturate to +-448
and round to nearest even (``fp8.round_e4m3`` in the kernel, then an exact cast).

Memory traffic: reads ``2 * T * KV * D`` elements of k/v and ``T`` indices, writes the
same ``2 * T * KV * D`` elements into the pool; one program per token.
"""

import torch

from furca.kernels._triton import check, require_triton, tl, triton
from furca.kernels.fp8 import round_e4m3, to_e4m3

_POOL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn)


def store_kv_ref(k_buf: torch.Tensor, v_buf: torch.Tensor, loc: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
    if k_buf.dtype == torch.float8_e4m3fn:
        k, v = to_e4m3(k), to_e4m3(v)
    k_buf[loc] = k.to(k_buf.dtype)
    v_buf[loc] = v.to(v_buf.dtype)


@triton.jit
def _store_kv_kernel(
    k_buf_ptr, v_buf_ptr, loc_ptr, k_ptr, v_ptr,
    stride_buf_slot, stride_buf_head, stride_k_tok, stride_k_head, stride_v_tok, stride_v_head,
    NUM_KV_HEADS, HEAD_DIM,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, KV_FP8: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(loc_ptr + t).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h[:, None] < NUM_KV_HEADS) & (offs_d[None, :] < HEAD_DIM)
    t64 = t.to(tl.int64)
    dst = slot * stride_buf_slot + offs_h[:, None] * stride_buf_head + offs_d[None, :]
    k = tl.load(k_ptr + t64 * stride_k_tok + offs_h[:, None] * stride_k_head + offs_d[None, :], mask=mask)
    v = tl.load(v_ptr + t64 * stride_v_tok + offs_h[:, None] * stride_v_head + offs_d[None, :], mask=mask)
    if KV_FP8:
        k = round_e4m3(k)
        v = round_e4m3(v)
    tl.store(k_buf_ptr + dst, k.to(k_buf_ptr.dtype.element_ty), mask=mask)
    tl.store(v_buf_ptr + dst, v.to(v_buf_ptr.dtype.element_ty), mask=mask)


def store_kv(k_buf: torch.Tensor, v_buf: torch.Tensor, loc: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """In place; see the module docstring."""
    require_triton()
    check(k_buf.dim() == 3 and k_buf.shape == v_buf.shape,
          f"k_buf/v_buf must both be (num_slots, num_kv_heads, head_dim), got {tuple(k_buf.shape)} "
          f"and {tuple(v_buf.shape)}")
    check(k_buf.stride() == v_buf.stride(), "k_buf and v_buf must have the same strides")
    check(k_buf.dtype == v_buf.dtype, f"k_buf and v_buf dtypes differ: {k_buf.dtype} vs {v_buf.dtype}")
    check(k_buf.dtype in _POOL_DTYPES, f"unsupported pool dtype {k_buf.dtype}")
    num_tokens = loc.shape[0]
    check(loc.dim() == 1 and loc.dtype in (torch.int32, torch.int64),
          f"loc must be a 1-D int32/int64 tensor, got {loc.dtype} {tuple(loc.shape)}")
    check(k.shape == v.shape == (num_tokens, k_buf.shape[1], k_buf.shape[2]),
          f"k/v must be (T={num_tokens}, {k_buf.shape[1]}, {k_buf.shape[2]}), got {tuple(k.shape)} "
          f"and {tuple(v.shape)}")
    check(k_buf.stride(2) == 1 and k.stride(2) == 1 and v.stride(2) == 1,
          "the head_dim axis must be contiguous (stride 1)")
    check(all(t.device == k_buf.device for t in (v_buf, loc, k, v)), "all tensors must be on one device")
    if num_tokens == 0:
        return
    num_kv_heads, head_dim = k_buf.shape[1], k_buf.shape[2]
    _store_kv_kernel[(num_tokens,)](
        k_buf, v_buf, loc, k, v,
        k_buf.stride(0), k_buf.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        num_kv_heads, head_dim,
        BLOCK_H=triton.next_power_of_2(num_kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
        KV_FP8=k_buf.dtype == torch.float8_e4m3fn, num_warps=4,
    )
