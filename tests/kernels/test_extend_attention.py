"""extend_attention vs extend_attention_ref over a pairwise table of shapes; each case
is a mixed batch (a prefill after a cached prefix, a decode row, a plain prefill)."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import DEVICE, assert_close, case_id, dtypes_for, indptr, make_pool, shuffled_slots

from furca.kernels._triton import KernelArgumentError
from furca.kernels.extend_attention import extend_attention, extend_attention_ref

# (group = H / KV, head_dim, new tokens, cached prefix, dtype): every pair appears
PAIRWISE = [
    (1, 64, 1, 0, "fp32"), (1, 128, 17, 437, "fp16"), (3, 64, 1000, 0, "fp16"),
    (8, 128, 1000, 437, "fp32"), (3, 64, 17, 437, "fp32"), (8, 128, 1, 0, "fp16"),
    (3, 128, 1, 437, "fp32"), (8, 64, 17, 0, "fp32"), (1, 64, 1000, 0, "fp32"),
]
CASES = [pytest.param(g, d, n, p, dt, id=case_id(g=g, d=d, new=n, prefix=p, dt=str(dt)[6:]))
         for g, d, n, p, name in PAIRWISE for dt in dtypes_for(name)]


def _inputs(group, head_dim, reqs: list[tuple[int, int]], dtype, seed=0, new_kv_dtype=None):
    """``reqs``: (prefix_len, new_len) per request."""
    gen = torch.Generator().manual_seed(seed)
    num_kv_heads = 1 if group == 8 else 2
    num_heads = group * num_kv_heads
    total_kv = sum(p + n for p, n in reqs)
    num_tokens = sum(n for _, n in reqs)
    num_slots = total_kv + 29
    k_buf, v_buf = make_pool(num_slots, num_kv_heads, head_dim, dtype, gen)
    kv_indices = shuffled_slots(num_slots, total_kv, gen)
    q = torch.randn(num_tokens, num_heads, head_dim, generator=gen).to(DEVICE, dtype)
    # k and v as the model passes them: views of one (T, KV + KV, D) tensor, different strides
    kv = torch.randn(num_tokens, 2 * num_kv_heads, head_dim, generator=gen).to(DEVICE, new_kv_dtype or dtype)
    k, v = kv[:, :num_kv_heads], kv[:, num_kv_heads:]
    return q, k, v, k_buf, v_buf, indptr([n for _, n in reqs]), indptr([p + n for p, n in reqs]), kv_indices


@pytest.mark.parametrize("group, head_dim, new_len, prefix_len, dtype", CASES)
def test_extend_matches_reference(group, head_dim, new_len, prefix_len, dtype):
    reqs = [(prefix_len, new_len), (prefix_len // 2 + 3, 1), (0, 5)]
    args = _inputs(group, head_dim, reqs, dtype)
    scaling = head_dim ** -0.5
    out = torch.full_like(args[0], float("nan"))  # every element must be written
    got = extend_attention(*args, scaling, max_qo_len=new_len if new_len > 5 else 5, out=out)
    assert got is out and got.dtype == dtype
    assert_close(got, extend_attention_ref(*args, scaling), dtype)


@pytest.mark.parametrize("block_m, block_n", [(16, 16), (32, 64)])
def test_extend_block_shapes(block_m, block_n):
    """Diagonal blocks that straddle tile edges; max_qo_len computed by the launcher."""
    args = _inputs(3, 64, [(45, 70), (0, 33), (130, 2)], torch.float32, seed=3)
    got = extend_attention(*args, 0.1, block_m=block_m, block_n=block_n)
    assert_close(got, extend_attention_ref(*args, 0.1), torch.float32)


def test_extend_new_kv_in_another_dtype_is_cast_to_the_pool_dtype():
    args = _inputs(1, 64, [(20, 9)], torch.float16, seed=4, new_kv_dtype=torch.float32)
    got = extend_attention(*args, 0.125)
    assert_close(got, extend_attention_ref(*args, 0.125), torch.float16)


def test_extend_rejects_bad_arguments():
    q, k, v, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices = _inputs(3, 64, [(4, 4)], torch.float32)
    with pytest.raises(KernelArgumentError, match="indptr"):
        extend_attention(q, k, v, k_buf, v_buf, qo_indptr, kv_indptr[:-1], kv_indices, 1.0)
    with pytest.raises(KernelArgumentError, match="k/v must be"):
        extend_attention(q, k[:, :1], v[:, :1], k_buf, v_buf, qo_indptr, kv_indptr, kv_indices, 1.0)
    with pytest.raises(KernelArgumentError, match="int32/int64"):
        extend_attention(q, k, v, k_buf, v_buf, qo_indptr.float(), kv_indptr, kv_indices, 1.0)
