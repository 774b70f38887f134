"""Int4Dot (int4 weights dotted with x rounded per group of 32 by AVX-512 VNNI vpdpbusd: to
int16 as two int8 halves, or to int8): lossless against its groups, the integer
arithmetic exact (equal to the same rounding emulated in fp64), within each variant's
tolerance of dequantize-then-F.linear at M = 1, 7 and 64 (kernel and dequantize + F.linear
paths), on one thread and on torch's OpenMP team; the int16 entry points
(``quantize_x16``, ``int4_dot16_blocks``) keep their contract when called from njit code;
``pack`` chooses the layout (``packed.INT4_DOT``, on by default) for fp16-exact groups of
32 only."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.int4_dot import Int4Dot, vnni_available
from furca.runtime.quant import packed
from furca.runtime.quant.packed import Int4Packed, pack
from furca.runtime.quant.rtn import quantize_int4

pytestmark = pytest.mark.skipif(not vnni_available(), reason="needs AVX512_VNNI and numba")
if vnni_available():  # the kernels compile VNNI code at import
    from numba import njit

    from furca.runtime.quant import cpu_int4_dot_kernels as kern

    @njit
    def _blocks_from_njit(x, words, scale, offset, out, b_lo, b_hi):
        """The int16 entry points called from njit code, as a compiled decode step calls them."""
        m, k = x.shape
        xq = np.empty((m, k), np.int16)
        xd, xsum = np.empty((m, k // 32), np.float32), np.empty((m, k // 32), np.float32)
        kern.quantize_x16(x, xq, xd, xsum)
        kern.int4_dot16_blocks(xq, xd, xsum, words, scale, offset, out, b_lo, b_hi)


N, K = 100, 256  # N not a multiple of the layout's 16-row padding


def _groups(kind: str, n=N, k=K, seed=0) -> QuantGroups:
    g = torch.Generator().manual_seed(seed)
    scale = (torch.rand(n, k // 32, generator=g) * 0.02 + 0.001).half().float()
    if kind == "Q4_1":  # unsigned codes, fp16 d and m as in a GGUF block
        return QuantGroups(torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8), scale,
                           (torch.randn(n, k // 32, generator=g) * 0.1).half().float(), 32, 4, "Q4_1")
    return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), scale, None, 32, 4, "Q4_0")


def _emulated(x: torch.Tensor, groups: QuantGroups, top: int = 127) -> torch.Tensor:
    """x rounded per group of 32 as the kernels round it (fp32 top / max|x|, half to even;
    top 127: int8, 32639: int16), integer dots exact, the rest in fp64; the offset term
    takes the exact sum of x (int8 kernel) or of the rounded x (int16)."""
    m, k = x.shape
    xb = x.view(m, -1, 32)
    amax = xb.abs().amax(dim=2, keepdim=True)
    xq = torch.round(xb * torch.where(amax > 0, top / amax, torch.zeros_like(amax))).double()
    d = (amax / top).double()
    q = groups.codes.double().view(groups.shape[0], -1, 32)
    off = torch.zeros_like(groups.scale) if groups.offset is None else groups.offset
    if groups.signed:
        q, off = q + 8, off - 8.0 * groups.scale
    dots = torch.einsum("mgj,ngj->mng", xq, q)
    xsum = xb.double().sum(2) if top == 127 else (xq * d).sum(2)
    return (dots * d[..., 0][:, None, :] * groups.scale.double()[None]
            + xsum[:, None, :] * off.double()[None]).sum(2)


def _x16(x: np.ndarray):
    m, k = x.shape
    xq, xd, xsum = np.empty((m, k), np.int16), np.empty((m, k // 32), np.float32), np.empty((m, k // 32), np.float32)
    kern.quantize_x16(x, xq, xd, xsum)
    return xq, xd, xsum


def test_quantize_x16_contract():
    x = torch.randn(3, K, generator=torch.Generator().manual_seed(5))
    x[1, 32:64] = 0.0  # an all-zero group
    xq, xd, xsum = _x16(x.numpy())
    halves = torch.from_numpy(xq.view(np.int8)).view(3, K // 32, 2, 32).to(torch.int32)  # [m, g, lo / hi, j]
    codes = 256 * halves[:, :, 1] + halves[:, :, 0]
    xb = x.view(3, -1, 32)
    amax = xb.abs().amax(dim=2)
    assert torch.allclose(torch.from_numpy(xd), amax / 32639, rtol=2e-7, atol=0)  # within an ulp (a reciprocal may be taken)
    want = torch.round(xb * torch.where(amax > 0, 32639 / amax, 0)[..., None])
    assert (codes - want).abs().max() <= 1 and (codes != want).float().mean() < 1e-2  # ties at .5 may go either way
    assert codes.abs().max() == 32639 and not codes[1, 1].any() and xd[1, 1] == 0 and xsum[1, 1] == 0
    want = (codes.double().sum(2) * torch.from_numpy(xd).double()).float()
    assert torch.allclose(torch.from_numpy(xsum), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0"])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7])
def test_int4_dot16_blocks_is_the_int16_x_arithmetic(kind, m):
    groups = _groups(kind, seed=m)
    layout = Int4Dot.pack(groups)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(3))
    nb = layout.words.shape[0]
    out = np.full((m, 16 * nb), np.nan, np.float32)
    kern.int4_dot16_blocks(*_x16(x.numpy()), layout.words, layout.scale, layout.offset, out, 0, nb)
    got = torch.from_numpy(out[:, :N]).double()
    want = _emulated(x, groups, 32639)
    assert (got - want).abs().max() <= 1e-6 * want.abs().max()
    exact = F.linear(x.double(), groups.dequantize().double())
    assert (got - exact).abs().max() <= 1e-4 * exact.abs().max()  # the int16 rounding of x
    part = np.full_like(out, np.nan)
    _blocks_from_njit(x.numpy(), layout.words, layout.scale, layout.offset, part, 2, 5)
    assert np.isnan(part[:, :32]).all() and np.isnan(part[:, 80:]).all()  # rows 32..79 only
    assert np.array_equal(part[:, 32:80], out[:, 32:80])


@pytest.fixture
def int4_dot_on(monkeypatch):
    monkeypatch.setattr(packed, "INT4_DOT", True)


def test_q4_groups_take_int4_dot_by_default_and_torchs_pack_when_off(monkeypatch):
    assert isinstance(pack(_groups("Q4_1")), Int4Dot)
    monkeypatch.setattr(packed, "INT4_DOT", False)
    assert isinstance(pack(_groups("Q4_1")), Int4Packed)


@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0"])
def test_pack_is_lossless_and_chosen(kind, int4_dot_on):
    groups = _groups(kind)
    layout = pack(groups)
    assert isinstance(layout, Int4Dot) and layout.shape == (N, K)
    assert torch.equal(layout.dequantize(), groups.dequantize())
    ids = torch.tensor([[3, 99], [0, 64]])
    assert torch.equal(layout.embedding(ids), groups.dequantize()[ids])


@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0"])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("x_bits, top, tol", [(16, 32639, 1e-4), (8, 127, 3e-2)])  # tol: the rounding of x
def test_matvec_is_the_rounded_x_arithmetic(kind, m, threads, x_bits, top, tol):
    groups = _groups(kind, seed=m)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(1))
    layout = Int4Dot.pack(groups)
    layout.x_bits = x_bits
    got = layout.matvec(x, threads).double()
    want = _emulated(x, groups, top)
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    exact = F.linear(x.double(), groups.dequantize().double())
    assert (got - exact).abs().max() <= tol * exact.abs().max()


def test_matvec_rejects_other_x_bits():
    layout = Int4Dot.pack(_groups("Q4_1"))
    layout.x_bits = 4
    with pytest.raises(ValueError, match="x_bits must be 8 or 16, got 4"):
        layout.matvec(torch.randn(1, K))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7, 64])
def test_matmul_both_paths(dtype, m, int4_dot_on):
    groups = _groups("Q4_1", seed=m)
    layout = pack(groups)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(2)).to(dtype)
    exact = F.linear(x.double(), groups.dequantize().double())
    y = layout.matmul(x)
    assert y.dtype == dtype and y.shape == (m, N)
    tol = (1e-4 if m <= layout.small_m else 1e-5) if dtype == torch.float32 else 1e-2  # int16 x; bf16 x and out
    assert (y.double() - exact).abs().max() <= tol * exact.abs().max()
    w = layout._weight(dtype)
    assert torch.allclose(w.float(), groups.dequantize().to(dtype).float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-6)


def test_other_int4_groups_keep_torchs_pack(int4_dot_on):
    assert isinstance(pack(quantize_int4(torch.randn(N, K) * 0.05, 32)), Int4Packed)  # fp32 scales
    assert isinstance(pack(quantize_int4(torch.randn(N, K) * 0.05, 64)), Int4Packed)
    g = _groups("Q4_1")
    assert Int4Dot.pack(QuantGroups(g.codes, g.scale, g.offset, 32, 5, "Q5_K")) is None
    assert Int4Dot.pack(g).words.shape == (112 // 16, K // 8, 16)  # N padded to 16
