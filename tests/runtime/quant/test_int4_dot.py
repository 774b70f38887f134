"""Int4Dot (int4 weights dotted with x rounded to int8 per group of 32 by AVX-512 VNNI):
lossless against its groups, the integer arithmetic exact (equal to the same rounding
emulated in fp64), within the int8-x tolerance of dequantize-then-F.linear at M = 1, 7
and 64 (kernel and dequantize + F.linear paths), on one thread and on torch's OpenMP
team; ``pack`` chooses it (with ``packed.INT4_DOT`` on) for fp16-exact groups of 32 only."""

import pytest
import torch
import torch.nn.functional as F

from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.int4_dot import Int4Dot, vnni_available
from furca.runtime.quant import packed
from furca.runtime.quant.packed import Int4Packed, pack
from furca.runtime.quant.rtn import quantize_int4

pytestmark = pytest.mark.skipif(not vnni_available(), reason="needs AVX512_VNNI and numba")

N, K = 100, 256  # N not a multiple of the layout's 16-row padding


def _groups(kind: str, n=N, k=K, seed=0) -> QuantGroups:
    g = torch.Generator().manual_seed(seed)
    scale = (torch.rand(n, k // 32, generator=g) * 0.02 + 0.001).half().float()
    if kind == "Q4_1":  # unsigned codes, fp16 d and m as in a GGUF block
        return QuantGroups(torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8), scale,
                           (torch.randn(n, k // 32, generator=g) * 0.1).half().float(), 32, 4, "Q4_1")
    return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), scale, None, 32, 4, "Q4_0")


def _emulated(x: torch.Tensor, groups: QuantGroups) -> torch.Tensor:
    """x rounded to int8 per group of 32 as the kernel rounds it (fp32 127 / max|x|,
    half to even), integer dots exact, the rest in fp64."""
    m, k = x.shape
    xb = x.view(m, -1, 32)
    amax = xb.abs().amax(dim=2, keepdim=True)
    xq = torch.round(xb * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))).double()
    d = (amax / 127.0).double()
    q = groups.codes.double().view(N, -1, 32)
    off = torch.zeros_like(groups.scale) if groups.offset is None else groups.offset
    if groups.signed:
        q, off = q + 8, off - 8.0 * groups.scale
    dots = torch.einsum("mgj,ngj->mng", xq, q)
    return (dots * d[..., 0][:, None, :] * groups.scale.double()[None]
            + xb.double().sum(2)[:, None, :] * off.double()[None]).sum(2)


@pytest.fixture
def int4_dot_on(monkeypatch):
    monkeypatch.setattr(packed, "INT4_DOT", True)


def test_q4_groups_keep_torchs_pack_by_default():
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
def test_matvec_is_the_int8_x_arithmetic(kind, m, threads):
    groups = _groups(kind, seed=m)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(1))
    got = Int4Dot.pack(groups).matvec(x, threads).double()
    want = _emulated(x, groups)
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    exact = F.linear(x.double(), groups.dequantize().double())
    assert (got - exact).abs().max() <= 3e-2 * exact.abs().max()  # the int8 rounding of x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7, 64])
def test_matmul_both_paths(dtype, m, int4_dot_on):
    groups = _groups("Q4_1", seed=m)
    layout = pack(groups)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(2)).to(dtype)
    exact = F.linear(x.double(), groups.dequantize().double())
    y = layout.matmul(x)
    assert y.dtype == dtype and y.shape == (m, N)
    tol = 3e-2 if m <= layout.small_m else (1e-5 if dtype == torch.float32 else 1e-2)
    assert (y.double() - exact).abs().max() <= tol * exact.abs().max()
    w = layout._weight(dtype)
    assert torch.allclose(w.float(), groups.dequantize().to(dtype).float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-6)


def test_other_int4_groups_keep_torchs_pack(int4_dot_on):
    assert isinstance(pack(quantize_int4(torch.randn(N, K) * 0.05, 32)), Int4Packed)  # fp32 scales
    assert isinstance(pack(quantize_int4(torch.randn(N, K) * 0.05, 64)), Int4Packed)
    g = _groups("Q4_1")
    assert Int4Dot.pack(QuantGroups(g.codes, g.scale, g.offset, 32, 5, "Q5_K")) is None
    assert Int4Dot.pack(g).words.shape == (112 // 16, K // 8, 16)  # N padded to 16
