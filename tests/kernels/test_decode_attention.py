"""decode_attention vs decode_attention_ref over a pairwise table of shapes."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import DEVICE, assert_close, case_id, dtypes_for, indptr, make_pool, shuffled_slots

from furca.kernels._triton import KernelArgumentError
from furca.kernels.decode_attention import decode_attention, decode_attention_ref

# (group = H / KV, head_dim, longest context, dtype): every pair of values appears
PAIRWISE = [
    (1, 64, 1, "fp32"), (1, 128, 17, "fp16"), (3, 64, 1000, "fp16"),
    (8, 128, 1000, "fp32"), (3, 64, 17, "fp32"), (3, 128, 1, "fp16"),
    (8, 64, 1, "fp16"), (1, 64, 1000, "fp32"), (8, 64, 17, "fp32"),
]
CASES = [pytest.param(g, d, n, dt, id=case_id(g=g, d=d, len=n, dt=str(dt)[6:]))
         for g, d, n, name in PAIRWISE for dt in dtypes_for(name)]


def _inputs(group: int, head_dim: int, lens: list[int], dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    num_kv_heads = 1 if group == 8 else 2
    num_slots = sum(lens) + 37
    k_buf, v_buf = make_pool(num_slots, num_kv_heads, head_dim, dtype, gen)
    kv_indices = shuffled_slots(num_slots, sum(lens), gen)
    q = torch.randn(len(lens), group * num_kv_heads, head_dim, generator=gen).to(DEVICE, dtype)
    return q, k_buf, v_buf, indptr(lens), kv_indices


@pytest.mark.parametrize("group, head_dim, seq_len, dtype", CASES)
def test_decode_matches_reference(group, head_dim, seq_len, dtype):
    lens = [seq_len, 1 + seq_len // 2, 3]  # a batch of mixed lengths
    q, k_buf, v_buf, kv_indptr, kv_indices = _inputs(group, head_dim, lens, dtype)
    scaling = head_dim ** -0.5
    out = torch.full_like(q, float("nan"))  # every element must be written
    got = decode_attention(q, k_buf, v_buf, kv_indptr, kv_indices, scaling, out=out, max_seq_len=max(lens))
    assert got is out and got.dtype == dtype
    assert_close(got, decode_attention_ref(q, k_buf, v_buf, kv_indptr, kv_indices, scaling), dtype)


@pytest.mark.parametrize("num_kv_splits", [1, 7])
def test_decode_splits_merge_and_empty_splits(num_kv_splits):
    """More splits than slots leaves splits empty: stage 2 must skip them."""
    lens = [1, 5, 130]
    q, k_buf, v_buf, kv_indptr, kv_indices = _inputs(3, 64, lens, torch.float32, seed=1)
    got = decode_attention(q, k_buf, v_buf, kv_indptr, kv_indices, 0.125, num_kv_splits=num_kv_splits, block_n=16)
    assert_close(got, decode_attention_ref(q, k_buf, v_buf, kv_indptr, kv_indices, 0.125), torch.float32)


def test_decode_strided_query_and_int32_indices():
    """q as a view of a wider (T, H + KV, D) tensor, as the model passes it."""
    lens = [40, 9]
    _, k_buf, v_buf, kv_indptr, kv_indices = _inputs(3, 64, lens, torch.float32, seed=2)
    qk = torch.randn(2, 6 + 2, 64, device=DEVICE)
    q = qk[:, :6]
    got = decode_attention(q, k_buf, v_buf, kv_indptr.int(), kv_indices.int(), 0.125)
    assert_close(got, decode_attention_ref(q, k_buf, v_buf, kv_indptr, kv_indices, 0.125), torch.float32)


def test_decode_rejects_bad_arguments():
    q, k_buf, v_buf, kv_indptr, kv_indices = _inputs(3, 64, [4, 4], torch.float32)
    with pytest.raises(KernelArgumentError, match="kv_indptr"):
        decode_attention(q, k_buf, v_buf, kv_indptr[:-1], kv_indices, 1.0)
    with pytest.raises(KernelArgumentError, match="multiple"):
        decode_attention(q[:, :5], k_buf, v_buf, kv_indptr, kv_indices, 1.0)
    with pytest.raises(KernelArgumentError, match="contiguous"):
        decode_attention(q.transpose(1, 2).contiguous().transpose(1, 2), k_buf, v_buf, kv_indptr, kv_indices, 1.0)
