"""Int4Cols (furca's own int4 layout and numba matvec): lossless against its groups, and
its matvec equals dequantize-then-F.linear at M = 1, 7 and 64, on one thread and on
torch's OpenMP team (groups split between the threads, partial sums added up)."""

import pytest
import torch
import torch.nn.functional as F

from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.int4_cols import Int4Cols

pytest.importorskip("numba")

N, K = 100, 256  # N not a multiple of the layout's 32-row padding


def _fp16_scale(n, groups, g):
    return (torch.rand(n, groups, generator=g) * 0.02 + 0.001).half().float()


def _groups(kind: str, n=N, k=K, seed=0) -> QuantGroups:
    g = torch.Generator().manual_seed(seed)
    if kind == "Q4_1":  # unsigned codes, fp16 d and m as in a GGUF block
        return QuantGroups(torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8), _fp16_scale(n, k // 32, g),
                           (torch.randn(n, k // 32, generator=g) * 0.1).half().float(), 32, 4, "Q4_1")
    if kind == "Q4_0":  # signed codes, no offset
        return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), _fp16_scale(n, k // 32, g),
                           None, 32, 4, "Q4_0")
    if kind == "g16":
        return QuantGroups(torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8), _fp16_scale(n, k // 16, g),
                           None, 16, 4, "int4")
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0", "g16"])
def test_dequantize_is_lossless(kind):
    groups = _groups(kind)
    layout = Int4Cols.pack(groups)
    assert layout is not None and layout.shape == (N, K)
    assert torch.equal(layout.dequantize(), groups.dequantize())
    assert layout.nbytes < groups.codes.numel()  # half a byte a weight plus the groups' fp16 pairs


@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0", "g16"])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("threads", [1, 2])
def test_matvec_equals_dequantize_then_linear(kind, m, threads):
    groups = _groups(kind, seed=m)
    layout = Int4Cols.pack(groups)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(1))
    want = F.linear(x.double(), groups.dequantize().double())
    got = torch.from_numpy(layout.matvec(x.numpy(), threads)).double()
    assert got.shape == (m, N)
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()


def test_declines_what_it_cannot_hold_exactly():
    g = _groups("Q4_1")
    fp32_scale = QuantGroups(g.codes, g.scale + 1e-9, g.offset, 32, 4, "int4")  # not an fp16 value
    assert Int4Cols.pack(fp32_scale) is None
    five_bits = QuantGroups(g.codes, g.scale, g.offset, 32, 5, "Q5_K")
    assert Int4Cols.pack(five_bits) is None
