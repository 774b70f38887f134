"""Round-to-nearest quantizers: error bounds, exactness on the grid, zero rows, bad shapes."""

import pytest
import torch

from furca.runtime.quant.rtn import quantize_int4, quantize_int8


def _weight(n=48, k=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * torch.rand(n, 1, generator=g)


def test_int8_per_channel_error_bound():
    w = _weight()
    q = quantize_int8(w)
    assert q.codes.dtype == torch.int8 and q.group == w.shape[1] and q.offset is None and q.bits == 8
    assert int(q.codes.abs().max()) == 127 and int(q.codes.min()) >= -127
    err = (q.dequantize() - w).abs()
    assert bool((err <= q.scale / 2 * (1 + 1e-5) + 1e-7).all())


@pytest.mark.parametrize("group", [32, 64, 128])
def test_int4_group_error_bound(group):
    w = _weight()
    q = quantize_int4(w, group)
    assert q.codes.dtype == torch.uint8 and q.group == group and q.scale.shape == (48, 256 // group)
    assert int(q.codes.max()) == 15 and int(q.codes.min()) == 0
    err = (q.dequantize() - w).abs().view(48, -1, group)
    bound = q.scale[..., None] / 2 * (1 + 1e-5) + 1e-6
    assert bool((err <= bound).all())


def test_exact_on_weights_already_on_the_grid():
    g = torch.Generator().manual_seed(1)
    # power-of-two scales and an offset on the same grid: every step is exact in fp32
    s8 = 2.0 ** -torch.randint(3, 9, (16, 1), generator=g).float()
    codes8 = torch.randint(-127, 128, (16, 64), generator=g)
    codes8[:, 0] = 127
    w8 = codes8.float() * s8
    assert torch.equal(quantize_int8(w8).dequantize(), w8)

    s4 = 2.0 ** -torch.randint(3, 9, (16, 2), generator=g).float()
    lo = torch.randint(-20, 20, (16, 2), generator=g).float() * s4
    codes4 = torch.randint(0, 16, (16, 2, 32), generator=g)
    codes4[..., 0], codes4[..., 1] = 0, 15
    w4 = (codes4.float() * s4[..., None] + lo[..., None]).view(16, 64)
    q = quantize_int4(w4, 32)
    assert torch.equal(q.codes.view(16, 2, 32).long(), codes4)
    assert torch.equal(q.dequantize(), w4)


def test_zero_and_constant_rows():
    w = _weight(8, 64)
    w[2] = 0.0
    w[5, :32] = 0.75
    q8 = quantize_int8(w)
    assert float(q8.scale[2]) == 0.0 and not bool(q8.codes[2].any())
    assert torch.equal(q8.dequantize()[2], w[2])
    q4 = quantize_int4(w, 32)
    deq = q4.dequantize()
    assert torch.equal(deq[2], w[2]) and torch.equal(deq[5, :32], w[5, :32])
    assert bool(torch.isfinite(deq).all())


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="does not divide the row length 96"):
        quantize_int4(torch.randn(4, 96), 64)
    with pytest.raises(ValueError, match="group must be one of"):
        quantize_int4(torch.randn(4, 96), 48)
    with pytest.raises(ValueError, match="2-D float"):
        quantize_int8(torch.randn(4, 4, 4))
