"""store_kv vs store_kv_ref: shuffled slots, pool layout as KVCache has it, k and v as
strided views of one projection output, a cast into the pool dtype."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import DEVICE, DTYPES, IS_INTERPRETED, make_pool, shuffled_slots

from furca.kernels._triton import KernelArgumentError
from furca.kernels.store_kv import store_kv, store_kv_ref

POOL_DTYPES = ["fp32", "fp16"] if IS_INTERPRETED else ["fp32", "fp16", "bf16"]


@pytest.mark.parametrize("pool_dtype", POOL_DTYPES)
@pytest.mark.parametrize("num_tokens, num_kv_heads, head_dim", [(1, 1, 64), (17, 3, 128), (1000, 8, 64)])
def test_store_kv_matches_reference(pool_dtype, num_tokens, num_kv_heads, head_dim):
    gen = torch.Generator().manual_seed(num_tokens)
    dtype = DTYPES[pool_dtype]
    k_buf, v_buf = make_pool(num_tokens + 50, num_kv_heads, head_dim, dtype, gen)
    k_ref, v_ref = k_buf.clone(), v_buf.clone()
    loc = shuffled_slots(num_tokens + 50, num_tokens, gen)
    kv = torch.randn(num_tokens, 3 * num_kv_heads, head_dim, generator=gen).to(DEVICE)  # fp32 in
    k, v = kv[:, :num_kv_heads], kv[:, 2 * num_kv_heads:]
    store_kv(k_buf, v_buf, loc, k, v)
    store_kv_ref(k_ref, v_ref, loc, k, v)
    assert torch.equal(k_buf, k_ref) and torch.equal(v_buf, v_ref)  # untouched slots included


def test_store_kv_rejects_bad_arguments():
    gen = torch.Generator().manual_seed(0)
    k_buf, v_buf = make_pool(10, 2, 64, torch.float32, gen)
    k = torch.randn(3, 2, 64, device=DEVICE)
    loc = torch.tensor([1, 2, 3], device=DEVICE)
    with pytest.raises(KernelArgumentError, match="k/v must be"):
        store_kv(k_buf, v_buf, loc[:2], k, k)
    with pytest.raises(KernelArgumentError, match="int32/int64"):
        store_kv(k_buf, v_buf, loc.float(), k, k)
    with pytest.raises(KernelArgumentError, match="same strides"):
        store_kv(k_buf, v_buf.contiguous(), loc, k, k)
