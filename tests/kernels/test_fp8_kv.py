"""fp8 (e4m3) KV pools: store_kv rounds and saturates exactly as ``fp8.to_e4m3`` does, and
decode / extend attention read the pool in the query's dtype against their references
(computed in fp32 from the same quantized K/V), within the query dtype's tolerance."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import DEVICE, IS_INTERPRETED, TOLERANCES, assert_close, indptr, make_pool, shuffled_slots

from furca.kernels._triton import KernelArgumentError
from furca.kernels.decode_attention import decode_attention, decode_attention_ref
from furca.kernels.extend_attention import extend_attention, extend_attention_ref
from furca.kernels.fp8 import E4M3_MAX, to_e4m3
from furca.kernels.store_kv import store_kv, store_kv_ref

FP8 = torch.float8_e4m3fn
# the interpreter's bf16 math is wrong (kernel_cases.py): bf16 queries run compiled only
Q_DTYPES = [torch.float16] if IS_INTERPRETED else [torch.float16, torch.bfloat16]


def _grid_values() -> torch.Tensor:
    """Every finite e4m3 value, the midpoints between neighbours (ties: round to even),
    values just off the midpoints, and values beyond +-448 (saturate)."""
    codes = torch.arange(256, dtype=torch.uint8).view(FP8).float()
    codes = codes[~codes.isnan()].unique()
    mid = (codes[1:] + codes[:-1]) / 2
    return torch.cat([codes, mid, mid * (1 + 2**-12), mid * (1 - 2**-12),
                      torch.tensor([449.0, 464.0, 479.0, 480.0, 1e4, -1e4, -500.0, 3e38])])


def test_to_e4m3_saturates_and_rounds_to_nearest_even():
    x = torch.tensor([1000.0, -1000.0, 448.0, 1.0625, 1.1875, 0.0])  # 1.0625: tie -> 1.0; 1.1875: tie -> 1.25
    assert to_e4m3(x).float().tolist() == [448.0, -448.0, 448.0, 1.0, 1.25, 0.0]
    assert not to_e4m3(_grid_values() * 100).float().isnan().any()


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_store_kv_into_fp8_pool_matches_to_e4m3(src_dtype):
    """The kernel's own rounding (fp8.round_e4m3) against torch's cast, on every grid
    value, every tie and values beyond the range; the untouched slots stay as they were."""
    gen = torch.Generator().manual_seed(1)
    values = _grid_values()
    num_kv, head_dim = 2, 64
    num_tokens = -(-values.numel() // (num_kv * head_dim))
    flat = torch.cat([values, torch.randn(num_tokens * num_kv * head_dim - values.numel(), generator=gen) * 50])
    k = flat[torch.randperm(flat.numel(), generator=gen)].view(num_tokens, num_kv, head_dim)
    v = -k.flip(0)
    k, v = k.to(DEVICE, src_dtype), v.to(DEVICE, src_dtype)
    k_buf, v_buf = make_pool(num_tokens + 20, num_kv, head_dim, FP8, gen)
    k_ref, v_ref = k_buf.clone(), v_buf.clone()
    loc = shuffled_slots(num_tokens + 20, num_tokens, gen)
    store_kv(k_buf, v_buf, loc, k, v)
    store_kv_ref(k_ref, v_ref, loc, k, v)
    # values, not bytes: Triton's interpreter writes +0 for a negative value that rounds to -0
    assert torch.equal(k_buf.float(), k_ref.float()) and torch.equal(v_buf.float(), v_ref.float())
    assert k_buf.float().abs().max() == E4M3_MAX and not k_buf.float().isnan().any()


@pytest.mark.parametrize("q_dtype", Q_DTYPES)
@pytest.mark.parametrize("group, head_dim", [(3, 64), (8, 128)])
def test_decode_reads_an_fp8_pool_in_the_query_dtype(q_dtype, group, head_dim):
    gen = torch.Generator().manual_seed(group)
    lens = [300, 17, 1]
    num_kv = 1 if group == 8 else 2
    num_slots = sum(lens) + 31
    k_buf, v_buf = make_pool(num_slots, num_kv, head_dim, FP8, gen)
    kv_indices = shuffled_slots(num_slots, sum(lens), gen)
    q = torch.randn(len(lens), group * num_kv, head_dim, generator=gen).to(DEVICE, q_dtype)
    scaling = head_dim ** -0.5
    got = decode_attention(q, k_buf, v_buf, indptr(lens), kv_indices, scaling, num_kv_splits=3)
    assert got.dtype == q_dtype
    assert_close(got, decode_attention_ref(q, k_buf, v_buf, indptr(lens), kv_indices, scaling), q_dtype)


@pytest.mark.parametrize("q_dtype", Q_DTYPES)
def test_extend_reads_an_fp8_pool_and_rounds_the_new_kv_as_stored(q_dtype):
    """A cached prefix read from the fp8 pool; the new tokens' K/V (some beyond +-448)
    rounded as store_kv stores them, so prefill sees what later decode steps read."""
    gen = torch.Generator().manual_seed(5)
    group, num_kv, head_dim = 3, 2, 64
    reqs = [(40, 23), (7, 1), (0, 9)]
    total_kv, num_tokens = sum(p + n for p, n in reqs), sum(n for _, n in reqs)
    k_buf, v_buf = make_pool(total_kv + 13, num_kv, head_dim, FP8, gen)
    kv_indices = shuffled_slots(total_kv + 13, total_kv, gen)
    q = torch.randn(num_tokens, group * num_kv, head_dim, generator=gen).to(DEVICE, q_dtype) * 0.05
    kv = torch.randn(num_tokens, 2 * num_kv, head_dim, generator=gen) * 3
    kv[::4, :, ::9] *= 400  # out of e4m3's range: saturates to +-448 in the pool
    kv = kv.to(DEVICE, q_dtype)
    k, v = kv[:, :num_kv], kv[:, num_kv:]
    args = (q, k, v, k_buf, v_buf, indptr([n for _, n in reqs]), indptr([p + n for p, n in reqs]), kv_indices)
    got = extend_attention(*args, 0.125, block_m=16, block_n=16)
    want = extend_attention_ref(*args, 0.125)
    # Each output is a softmax-weighted sum of V values up to +-448 that nearly cancel; the
    # kernel rounds the weights to the query dtype before P @ V (as flash attention does),
    # so its error scales with sum(p * |v|), not with the (small) result: bf16's 2^-8 times
    # 448 times a weight of a few percent is ~0.05 (seen on an H200). Bound it so.
    atol, rtol = TOLERANCES[q_dtype]
    mass = extend_attention_ref(q, k, v.abs(), k_buf, v_buf.float().abs().to(FP8), *args[5:], 0.125).float()
    err = (got.float() - want.float()).abs()
    assert not got.isnan().any() and (err <= atol + rtol * mass).all(), \
        f"max error {err.max():.4g}; worst error / (atol + rtol * mass) {(err / (atol + rtol * mass)).max():.3g}"
    # the reference's new K/V really are the saturated ones: unrounded K/V differ
    unrounded = extend_attention_ref(q, k.float(), v.float(), k_buf.float(), v_buf.float(), *args[5:], 0.125)
    assert (unrounded.float() - want.float()).abs().max() > 1.0


def test_fp8_pool_needs_fp16_or_bf16_queries():
    gen = torch.Generator().manual_seed(0)
    k_buf, v_buf = make_pool(10, 2, 64, FP8, gen)
    q = torch.randn(1, 2, 64, device=DEVICE)
    with pytest.raises(KernelArgumentError, match="fp16 or bf16 queries"):
        decode_attention(q, k_buf, v_buf, indptr([3]), torch.arange(1, 4, device=DEVICE), 0.125)
    with pytest.raises(KernelArgumentError, match="fp16 or bf16 queries"):
        extend_attention(q, q[:, :2], q[:, :2], k_buf, v_buf, indptr([1]), indptr([3]),
                         torch.arange(1, 4, device=DEVICE), 0.125)
