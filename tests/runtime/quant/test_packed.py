"""CPU compute layouts: matmul equals dequantize-then-F.linear on both paths (packed
kernel, dequantize + F.linear), embedding rows are exact, nbytes shrink as expected."""

import pytest
import torch
import torch.nn.functional as F

from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.packed import GroupInt8, Int4Packed, pack
from furca.runtime.quant.rtn import quantize_int4, quantize_int8

N, K = 100, 256  # N not a multiple of the int4 pack's 64-row block


def _groups(kind: str, n=N, k=K, seed=0) -> QuantGroups:
    g = torch.Generator().manual_seed(seed)

    def scale(group):
        return torch.rand(n, k // group, generator=g) * 0.02 + 0.001

    if kind == "u4_offset":
        return QuantGroups(torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8), scale(32),
                           torch.randn(n, k // 32, generator=g) * 0.1, 32, 4, "Q4_1")
    if kind == "s4":
        return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), scale(64), None, 64, 4, "s4")
    if kind == "s4_channel":  # group = K: split into torch's groups, scale repeated
        return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), scale(k), None, k, 4, "s4")
    if kind == "s4_g16":  # a group torch's int4 op cannot take
        return QuantGroups(torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8), scale(16), None, 16, 4, "s4")
    if kind == "s8_g32":
        return QuantGroups(torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8), scale(32), None, 32, 8,
                           "Q8_0")
    if kind == "s6_g16":
        return QuantGroups(torch.randint(-32, 32, (n, k), generator=g, dtype=torch.int8), scale(16), None, 16, 6,
                           "Q6_K")
    if kind == "u5_offset":
        return QuantGroups(torch.randint(0, 32, (n, k), generator=g, dtype=torch.uint8), scale(32),
                           torch.randn(n, k // 32, generator=g) * 0.1, 32, 5, "Q5_K")
    if kind == "int8_channel":
        return quantize_int8(torch.randn(n, k, generator=g))
    raise AssertionError(kind)


LAYOUT = {"u4_offset": Int4Packed, "s4": Int4Packed, "s4_channel": Int4Packed, "s4_g16": GroupInt8,
          "s8_g32": GroupInt8, "s6_g16": GroupInt8, "u5_offset": GroupInt8, "int8_channel": GroupInt8}
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}  # of max |reference|


@pytest.fixture(scope="module", params=sorted(LAYOUT))
def packed(request):
    groups = _groups(request.param)
    p = pack(groups)
    assert type(p) is LAYOUT[request.param]
    return groups, p


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("path", ["kernel", "dequant"])
def test_matmul_equals_dequantize_then_linear(packed, m, dtype, path):
    _, p = packed
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(m)).to(dtype)
    ref = F.linear(x.float(), p.dequantize())
    saved = p.small_m, p.small_m_fp32
    p.small_m = p.small_m_fp32 = 1 << 20 if path == "kernel" else 0
    try:
        y = p.matmul(x)
    finally:
        p.small_m, p.small_m_fp32 = saved
    assert y.dtype == dtype and y.shape == (m, N)
    err = float((y.float() - ref).abs().max())
    assert err <= TOL[dtype] * float(ref.abs().max()), err


def test_dequantize_matches_the_groups(packed):
    groups, p = packed
    exact = groups.dequantize()
    w = p.dequantize()
    assert w.dtype == torch.float32 and w.shape == (N, K) == p.shape
    if isinstance(p, GroupInt8):
        assert torch.equal(w, exact)
    else:  # bf16 scale / zero: relative error of a bf16 rounding, per weight, vs the row's largest
        rel = (w - exact).abs() / exact.abs().amax(dim=1, keepdim=True)
        assert float(rel.max()) < 2 ** -6


def test_embedding_rows_are_exact(packed):
    _, p = packed
    ids = torch.tensor([[0, 31, 32, 63], [64, 99, 5, 0]])
    rows = p.embedding(ids)
    assert rows.shape == (2, 4, K) and rows.dtype == torch.float32
    assert torch.equal(rows, p.dequantize()[ids])
    with pytest.raises(IndexError):
        p.embedding(torch.tensor([N]))


@pytest.mark.parametrize("kind,fp32_per_byte", [
    ("u4_offset", 4 / (0.5 + 4 / 32)),  # two codes a byte + bf16 scale and zero per 32
    ("s4", 4 / (0.5 + 4 / 64)),
    ("s8_g32", 4 / (1 + 4 / 32)),       # a byte a code + fp32 scale per 32
    ("u5_offset", 4 / (1 + 8 / 32)),    # + fp32 offset per 32
    ("int8_channel", 4 / (1 + 6 / K)),  # + fp32 scale per row, and its bf16 copy for the int8 x bf16 kernel
])
def test_nbytes_shrink_by_the_expected_factor(kind, fp32_per_byte):
    p = pack(_groups(kind, n=128))  # a whole number of 64-row blocks: no padding
    assert 128 * K * 4 / p.nbytes == pytest.approx(fp32_per_byte)


def test_rtn_int4_through_the_pack_and_zero_rows():
    w = torch.randn(64, K)
    w[3] = 0.0
    p = pack(quantize_int4(w, 128))
    assert isinstance(p, Int4Packed)
    y = p.matmul(torch.randn(2, K))
    assert bool((y[:, 3] == 0).all())
    assert float((p.dequantize() - w).abs().max()) < float(w.abs().max()) / 15


def test_bad_input():
    p = pack(_groups("s8_g32"))
    with pytest.raises(ValueError, match=r"x must be \(M, 256\)"):
        p.matmul(torch.randn(2, 128))
    with pytest.raises(ValueError, match="fp32 or bf16"):
        p.matmul(torch.randn(2, K, dtype=torch.float64))
    with pytest.raises(ValueError, match="CPU layouts"):
        pack(_groups("s4"), "cuda")
    assert p.matmul(torch.randn(0, K)).shape == (0, N)
    x = torch.randn(2, 3, K)
    assert torch.equal(p.matmul(x), p.matmul(x.view(6, K)).view(2, 3, N))


@pytest.mark.parametrize("kind,n", [("s8_g32", 103), ("u5_offset", 103), ("u4_offset", 200)])
def test_kernels_split_over_threads_at_odd_row_bounds(monkeypatch, kind, n):
    """Rows split between two threads at bounds that are no multiple of the kernels' row
    blocks (four rows in the group matmul, the int4 pack's 64): every row computed once,
    on both paths, fp32 and bf16."""
    import furca.runtime.quant.packed as packed_mod

    monkeypatch.setattr(packed_mod, "_MIN_WEIGHTS_PER_THREAD", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        p = pack(_groups(kind, n=n))
        exact = p.dequantize()
        w32 = p._weight(torch.float32).clone()  # _weight may return the thread's scratch, reused below
        assert w32.shape == (n, K)
        assert float((w32 - exact).abs().max()) <= 1e-6 * float(exact.abs().max())
        wbf = p._weight(torch.bfloat16)
        assert wbf.dtype == torch.bfloat16 and wbf.shape == (n, K)
        assert float((wbf.float() - exact).abs().max()) <= 2 ** -8 * float(exact.abs().max())
        for m in (1, 5):
            x = torch.randn(m, K, generator=torch.Generator().manual_seed(m))
            ref = F.linear(x, exact)
            y = p._small(x) if isinstance(p, GroupInt8) else F.linear(x, w32)
            assert float((y - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    finally:
        torch.set_num_threads(threads)


def test_the_int4_pack_layout_is_probed_for_this_cpu(monkeypatch):
    """torch packs int4 for the CPU it runs on: rows in blocks of 64 where its kernels are
    AVX-512, of 32 on AVX2 (two halves a byte). The probe names the layout this torch
    uses (the decode of the pack, tested above, depends on it); an unknown layout keeps
    the weights in GroupInt8."""
    from furca.runtime.quant import packed as packed_mod

    h = packed_mod._int4pack_half()
    assert h in (16, 32) and packed_mod._ROW_BLOCK == 2 * h
    q = torch.randint(0, 16, (2 * h, 64), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    p = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1).view(-1, 64, h).to(torch.int32)
    # byte [b, k, d] = q[2h b + d, k] | q[2h b + d + h, k] << 4
    assert torch.equal(p[0] & 15, q[:h].t()) and torch.equal(p[0] >> 4, q[h:].t())
    monkeypatch.setattr(packed_mod, "_ROW_BLOCK", 0)
    assert isinstance(pack(_groups("u4_offset")), GroupInt8)
