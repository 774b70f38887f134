"""The numba glue between a CPU layer's matmuls (`furca.runtime.models.cpu_glue`): the
same values as the torch ops it replaces, for fp32 and bf16 on either side, and a model
whose forward pass gives the same logits with the glue as without it."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from furca.runtime.models import cpu_glue

pytestmark = pytest.mark.skipif(not cpu_glue.available(), reason="numba glue kernels unavailable")

DTYPES = [torch.float32, torch.bfloat16]


def _ref_norm(residual, weight, eps, dtype):
    return (weight * (residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps))).to(dtype)


@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("in_dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
def test_add_rms_norm_matches_torch(rows, in_dtype, out_dtype):
    g = torch.Generator().manual_seed(rows)
    residual = torch.randn(rows, 96, generator=g) * 3
    delta = torch.randn(rows, 96, generator=g).to(in_dtype)
    weight = torch.randn(96, generator=g)
    expect_res = residual + delta.float()
    expect = _ref_norm(expect_res, weight, 1e-5, out_dtype)

    got = cpu_glue.add_rms_norm(delta, residual, weight.numpy(), 1e-5, out_dtype)

    assert got.dtype == out_dtype and got.shape == (rows, 96)
    assert torch.equal(residual, expect_res)  # updated in place, exactly (one fp32 add)
    # fp32: the sum order differs (~1 ulp); bf16: at most a rounding boundary apart
    tol = dict(rtol=1e-5, atol=1e-5) if out_dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(got.float(), expect.float(), **tol)


def test_norm_without_delta_leaves_the_residual():
    residual = torch.randn(3, 64)
    before = residual.clone()
    got = cpu_glue.add_rms_norm(None, residual, torch.ones(64).numpy(), 1e-6, torch.float32)
    assert torch.equal(residual, before)
    torch.testing.assert_close(got, _ref_norm(before, torch.ones(64), 1e-6, torch.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("in_dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", DTYPES)
def test_silu_mul_matches_torch(rows, in_dtype, out_dtype):
    g = torch.Generator().manual_seed(100 + rows)
    gate_up = (torch.randn(rows, 2 * 160, generator=g) * 4).to(in_dtype)
    gate, up = gate_up.float().chunk(2, dim=-1)
    expect = (F.silu(gate) * up).to(out_dtype)

    got = cpu_glue.silu_mul(gate_up, out_dtype)

    assert got.dtype == out_dtype and got.shape == (rows, 160)
    tol = dict(rtol=1e-5, atol=1e-6) if out_dtype == torch.float32 else dict(rtol=8e-3, atol=1e-3)
    torch.testing.assert_close(got.float(), expect.float(), **tol)


def test_silu_mul_extremes():
    gate = torch.tensor([[-1e4, -100.0, -88.0, -20.0, 0.0, 1e-8, 20.0, 100.0, 1e4, float("inf"), float("nan"), -0.0]])
    up = torch.full_like(gate, 2.0)
    got = cpu_glue.silu_mul(torch.cat([gate, up], dim=1), torch.float32)
    expect = F.silu(gate) * up
    torch.testing.assert_close(got, expect, rtol=1e-6, atol=1e-30, equal_nan=True)


@pytest.mark.parametrize("rows", [1, 9])
@pytest.mark.parametrize("in_dtype", DTYPES)
@pytest.mark.parametrize("kv_dtype", DTYPES)
def test_rope_qkv_matches_apply_rope(rows, in_dtype, kv_dtype):
    from furca.runtime.models.rope import RotaryEmbedding, apply_rope

    heads, kv_heads, dim = 6, 2, 16
    g = torch.Generator().manual_seed(rows)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g).to(in_dtype)
    rope = RotaryEmbedding(dim, 10000.0, None, 64, "cpu")
    positions = torch.randint(0, 60, (rows,), generator=g)
    cos, sin = rope.cos_sin(positions, torch.float32)
    split = qkv.float().view(rows, heads + 2 * kv_heads, dim)
    qk = apply_rope(split[:, :heads + kv_heads], cos, sin)

    q, k, v = cpu_glue.rope_qkv(qkv, cos, sin, heads, kv_heads, kv_dtype)

    assert q.dtype == torch.float32 and k.dtype == v.dtype == kv_dtype
    torch.testing.assert_close(q, qk[:, :heads], rtol=1e-6, atol=1e-6)
    tol = dict(rtol=1e-6, atol=1e-6) if kv_dtype == torch.float32 else dict(rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(k.float(), qk[:, heads:].to(kv_dtype).float(), **tol)
    assert torch.equal(v, split[:, heads + kv_heads:].to(kv_dtype))  # v is only split and narrowed


@pytest.mark.parametrize("kv_dtype", DTYPES)
def test_rope_qkv_stores_into_the_pool_as_kv_cache_store_does(kv_dtype):
    from furca.runtime.kv_cache import KVCache
    from furca.runtime.models.rope import RotaryEmbedding

    heads, kv_heads, dim, rows = 6, 2, 16, 5
    g = torch.Generator().manual_seed(7)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g)
    cos, sin = RotaryEmbedding(dim, 10000.0, None, 64, "cpu").cos_sin(torch.arange(rows) * 3, torch.float32)
    loc = torch.tensor([9, 2, 17, 4, 11])
    stored, reference = (KVCache(20, 2, kv_heads, dim, kv_dtype, torch.device("cpu")) for _ in range(2))

    q, k, v = cpu_glue.rope_qkv(qkv, cos, sin, heads, kv_heads, kv_dtype,
                                (*stored.arrays(1), loc))
    reference.store(1, loc, k, v)

    for layer in (0, 1):  # the named layer's slots written, nothing else
        assert torch.equal(stored.k_heads[layer], reference.k_heads[layer])
        assert torch.equal(stored.v_heads[layer], reference.v_heads[layer])
    assert stored.k_heads[1][:, loc].abs().sum() > 0


def test_bf16_rounding_is_round_to_nearest_even():
    # values exactly between two bf16 neighbours, and ones just off the tie
    base = torch.tensor([1.0, 1.0078125, -3.0, 65280.0]).float()
    ulp = torch.tensor([2.0 ** -7, 2.0 ** -7, 2.0 ** -6, 256.0])
    x = torch.cat([base + ulp / 2, base + ulp / 2 * 1.01, base - ulp / 2 * 0.99, torch.tensor([3e38, -1e-40])])
    x = x[None, :]
    got = cpu_glue.add_rms_norm(None, x.clone(), torch.ones(x.shape[1]).numpy(), 0.0, torch.bfloat16)
    normed = _ref_norm(x, torch.ones(x.shape[1]), 0.0, torch.float32)
    assert torch.equal(got, normed.to(torch.bfloat16))


def test_model_logits_with_and_without_glue(tiny_engine_model):
    """An fp32 model: the glue changes only the order of fp32 sums."""
    from furca.runtime.engine import Engine

    loaded, _ = tiny_engine_model
    model = loaded.model
    assert model.glue_dtype == torch.float32
    params = {"max_new_tokens": 6, "temperature": 0.0, "return_logprob": True, "ignore_eos": True}
    prompt = list(range(5, 40))
    outs = []
    try:
        for glue in (torch.float32, None):
            model.glue_dtype = glue
            with Engine(loaded, max_total_tokens=1024) as engine:
                outs.append(engine.generate(input_ids=[prompt], sampling_params=[params])[0])
    finally:
        model.glue_dtype = torch.float32
    assert outs[0]["output_ids"] == outs[1]["output_ids"]
    a, b = (np.array([e[0] for e in o["meta_info"]["output_token_logprobs"]]) for o in outs)
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_outputs_are_64_byte_aligned():
    """torch's int8 x bf16 matmul faults on an input only 16-byte aligned (numpy's own
    allocations); the glue's outputs feed the projections."""
    for dtype in DTYPES:
        for rows in (1, 3):
            res = torch.randn(rows, 40)
            outs = [cpu_glue.add_rms_norm(None, res, torch.ones(40).numpy(), 1e-6, dtype),
                    cpu_glue.silu_mul(torch.randn(rows, 80), dtype)]
            cos_sin = torch.ones(rows, 1, 4), torch.zeros(rows, 1, 4)
            outs += cpu_glue.rope_qkv(torch.randn(rows, 5 * 8), *cos_sin, 3, 1, dtype)
            assert all(t.data_ptr() % 64 == 0 for t in outs)
