"""int4 / int8 / fp8 dequantize-in-the-loop matmuls (Triton) against their plain-torch
references; the references against ``QuantGroups.dequantize()`` then ``F.linear``; the
packings exact; bad inputs rejected by name."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import DEVICE, DTYPES, IS_INTERPRETED

from furca.errors import FurcaError
from furca.kernels._triton import KernelArgumentError
from furca.kernels.dequant_matmul import (
    dequantize, fp8_matmul, fp8_matmul_ref, int4_matmul, int4_matmul_ref, int8_matmul, int8_matmul_ref, pack_fp8,
    pack_int4, pack_int8, quantize_fp8)
from furca.runtime.quant.groups import QuantGroups

# ||got - ref|| / ||ref|| against the fp32 reference from the same inputs: fp32 sums in
# another order; fp16 / bf16 add the output's rounding.
REL_TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _groups(n: int, k: int, group: int, bits: int, *, signed: bool, zero: bool, fp16_scales: bool = False,
            seed: int = 0) -> QuantGroups:
    gen = torch.Generator().manual_seed(seed)
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    codes = torch.randint(lo, hi, (n, k), generator=gen).to(torch.int8 if signed else torch.uint8)
    scale = torch.rand(n, k // group, generator=gen) * 0.05 + 0.01
    offset = -torch.rand(n, k // group, generator=gen) * 0.3 if zero else None
    if fp16_scales:  # as GGUF stores d and m
        scale = scale.half().float()
        offset = None if offset is None else offset.half().float()
    return QuantGroups(codes, scale, offset, group, bits, f"test{bits}")


def _x(m: int, k: int, dtype: torch.dtype, seed: int = 1, strided: bool = False) -> torch.Tensor:
    x = torch.randn(m, k + (5 if strided else 0), generator=torch.Generator().manual_seed(seed))
    x = x[:, :k] if strided else x  # a row stride that is not K
    return x.to(DEVICE, dtype)


def _assert_matches(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.isfinite(got).all()
    rel = float((got.double() - want.double()).norm() / want.double().norm())
    assert rel < REL_TOL[want.dtype], f"relative error {rel:.3g}"


NO_FP8 = pytest.mark.skipif(not IS_INTERPRETED and torch.cuda.get_device_capability() < (8, 9),
                            reason="e4m3 needs an sm_89+ GPU")


def _dtype(name: str) -> torch.dtype:
    if name == "bf16" and IS_INTERPRETED:
        pytest.skip("the interpreter's bf16 math is wrong")
    return DTYPES[name]


# (group, M, x dtype, signed codes, N): every group at M = 1, 7, 64, both dtypes, N off the tile
INT4_CASES = [(32, 1, "fp32", False, 80), (32, 7, "fp16", False, 64), (32, 64, "fp32", True, 48),
              (64, 1, "fp16", True, 64), (64, 7, "fp32", False, 80), (64, 64, "fp16", False, 64),
              (128, 1, "fp32", False, 48), (128, 7, "fp16", True, 80), (128, 64, "bf16", False, 64)]


@pytest.mark.parametrize("group,m,dtype,signed,n", INT4_CASES)
def test_int4_matches_reference(group, m, dtype, signed, n):
    k = 2 * group if group > 32 else 96
    qg = _groups(n, k, group, 4, signed=signed, zero=not signed, seed=group + m)
    packed = pack_int4(qg).to(DEVICE)
    x = _x(m, k, _dtype(dtype), strided=m == 7)
    _assert_matches(int4_matmul(x, packed), int4_matmul_ref(x, packed))


# (layout, M, dtype): per-channel with K = 100 (K tail masked), Q6_K-like group 16,
# Q5_K-like unsigned codes with offsets
INT8_CASES = [("channel", 1, "fp32"), ("channel", 7, "fp16"), ("channel", 64, "fp32"),
              ("g16", 1, "fp16"), ("g16", 64, "fp32"), ("g32-unsigned", 7, "fp32"), ("g32-unsigned", 64, "fp16")]


def _int8_groups(layout: str, seed: int) -> QuantGroups:
    if layout == "channel":
        return _groups(72, 100, 100, 8, signed=True, zero=False, seed=seed)
    if layout == "g16":
        return _groups(64, 96, 16, 6, signed=True, zero=False, seed=seed)
    return _groups(48, 128, 32, 8, signed=False, zero=True, seed=seed)


@pytest.mark.parametrize("layout,m,dtype", INT8_CASES)
def test_int8_matches_reference(layout, m, dtype):
    qg = _int8_groups(layout, seed=m)
    packed = pack_int8(qg).to(DEVICE)
    x = _x(m, qg.shape[1], _dtype(dtype), strided=m == 1)
    _assert_matches(int8_matmul(x, packed), int8_matmul_ref(x, packed))


@NO_FP8
@pytest.mark.parametrize("m,dtype", [(1, "fp32"), (7, "fp16"), (64, "fp32"), (64, "bf16")])
def test_fp8_matches_reference(m, dtype):
    w = torch.randn(80, 72, generator=torch.Generator().manual_seed(m))  # K = 72: a masked K tail
    packed = pack_fp8(*quantize_fp8(w)).to(DEVICE)
    x = _x(m, 72, _dtype(dtype))
    _assert_matches(fp8_matmul(x, packed), fp8_matmul_ref(x, packed))


@pytest.mark.parametrize("kind", ["int4", "int8", pytest.param("fp8", marks=NO_FP8)])
def test_split_k_sums_the_same(kind):
    """The decode path on a large GPU: K split across programs, partial sums added."""
    k, x = 256, _x(3, 256, torch.float32)
    if kind == "fp8":
        packed, fn = pack_fp8(*quantize_fp8(torch.randn(40, k))), fp8_matmul
    else:
        pack, fn = (pack_int4, int4_matmul) if kind == "int4" else (pack_int8, int8_matmul)
        packed = pack(_groups(40, k, 32, 4, signed=False, zero=True))
    packed = packed.to(DEVICE)
    want = fn(x, packed, block_k=32)
    for split in (3, 8):
        _assert_matches(fn(x, packed, block_k=32, split_k=split), want)


@pytest.mark.parametrize("pack", [pack_int4, pack_int8])
@pytest.mark.parametrize("fp16_scales", [True, False])
def test_references_equal_groups_dequantize_then_linear(pack, fp16_scales):
    """The packings are lossless (fp16 scales only where exact), so the kernels'
    specification is the QuantGroups' own weight."""
    for signed in (False, True):
        qg = _groups(24, 128, 32, 4, signed=signed, zero=not signed, fp16_scales=fp16_scales, seed=int(signed))
        packed = pack(qg)
        assert packed.scale.dtype == (torch.float16 if fp16_scales else torch.float32)
        assert torch.equal(dequantize(packed), qg.dequantize())
        x = torch.randn(5, 128, generator=torch.Generator().manual_seed(3))
        ref = int4_matmul_ref if pack is pack_int4 else int8_matmul_ref
        assert torch.equal(ref(x, packed), torch.nn.functional.linear(x, qg.dequantize()))


def test_int4_packs_two_codes_a_byte_and_forced_fp16_scales_round():
    qg = _groups(64, 256, 64, 4, signed=False, zero=True)
    exact, halved = pack_int4(qg), pack_int4(qg, scale_dtype=torch.float16)
    assert exact.qweight.numel() * 4 == 64 * 256 // 2
    assert halved.nbytes < exact.nbytes and halved.scale.dtype == torch.float16
    torch.testing.assert_close(dequantize(halved), qg.dequantize(), rtol=2e-3, atol=2e-3)


def test_fp8_quantization_error_and_range():
    w = torch.randn(32, 256, generator=torch.Generator().manual_seed(5)) * 0.02
    codes, scale = quantize_fp8(w)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (32,)
    assert torch.equal(codes.float().abs().amax(1), torch.full((32,), 448.0))
    back = dequantize(pack_fp8(codes, scale))
    assert float((back - w).norm() / w.norm()) < 0.05  # e4m3: 3 mantissa bits


def test_bad_inputs_are_named():
    packed = pack_int4(_groups(32, 128, 32, 4, signed=False, zero=True)).to(DEVICE)
    with pytest.raises(KernelArgumentError, match="K = 64"):
        int4_matmul(_x(2, 64, torch.float32), packed)
    with pytest.raises(KernelArgumentError, match="int8_matmul needs a int8 PackedWeight"):
        int8_matmul(_x(2, 128, torch.float32), packed)
    with pytest.raises(KernelArgumentError, match="x must be"):
        int4_matmul(_x(2, 128, torch.float32).to(torch.int32), packed)
    with pytest.raises(KernelArgumentError, match="group 16"):
        pack_int4(_groups(8, 64, 16, 4, signed=False, zero=True))
    with pytest.raises(KernelArgumentError, match="group 48"):
        pack_int8(_groups(8, 96, 48, 8, signed=True, zero=False))
    with pytest.raises(KernelArgumentError, match="at most 4 bits"):
        pack_int4(_groups(8, 64, 32, 8, signed=True, zero=False))
    with pytest.raises(KernelArgumentError, match="block_k 64 must divide the group 32"):
        int4_matmul(_x(2, 128, torch.float32), packed, block_k=64)
    with pytest.raises(KernelArgumentError, match="float8_e4m3fn"):
        pack_fp8(torch.zeros(4, 32), torch.ones(4))
    assert issubclass(KernelArgumentError, FurcaError)


def test_empty_batch():
    packed = pack_int8(_groups(16, 32, 32, 8, signed=True, zero=False)).to(DEVICE)
    assert int8_matmul(_x(0, 32, torch.float32), packed).shape == (0, 16)
