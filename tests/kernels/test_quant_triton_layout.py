"""The CUDA side of the quantized model's weights (furca/runtime/quant/packed_triton.py):
``TritonPacked`` / ``TritonFp8`` behind the packed-weight interface, run here by Triton's
interpreter on CPU tensors: matmul against the groups' own dequantized weight, embedding
rows from columns, the layout chosen by code width and group."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_cases import DEVICE

from furca.runtime.quant import rtn
from furca.runtime.quant.groups import QuantGroups

pytest.importorskip("triton")


def _q8_0(n: int, k: int, seed: int = 0) -> QuantGroups:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(-128, 128, (n, k), generator=gen).to(torch.int8)
    return QuantGroups(codes, torch.rand(n, k // 32, generator=gen) * 0.01, None, 32, 8, "Q8_0")


@pytest.mark.parametrize("kind", ["int4", "q8_0", "int8"])
def test_triton_layout_computes_its_groups(kind):
    from furca.runtime.quant.packed_triton import TritonPacked

    gen = torch.Generator().manual_seed(1)
    w = torch.randn(96, 128, generator=gen)
    groups = {"int4": lambda: rtn.quantize_int4(w, 32), "q8_0": lambda: _q8_0(96, 128),
              "int8": lambda: rtn.quantize_int8(w)}[kind]()
    packed = TritonPacked(groups, DEVICE)
    assert packed.w.kind == ("int4" if kind == "int4" else "int8")
    assert packed.shape == (96, 128)
    assert torch.equal(packed.dequantize().cpu(), groups.dequantize())  # lossless packing
    x = torch.randn(2, 3, 128, generator=gen)  # leading dimensions pass through
    got = packed.matmul(x.to(DEVICE)).cpu()
    want = F.linear(x, groups.dequantize())
    assert got.shape == (2, 3, 96)
    assert torch.allclose(got, want, atol=1e-4 * want.abs().max().item())
    ids = torch.tensor([[5, 0], [95, 5]])
    assert torch.equal(packed.embedding(ids.to(DEVICE)).cpu(), groups.dequantize()[ids])
    assert packed.nbytes <= w.numel() * (0.75 if kind == "int4" else 1.25)  # fp32: 4 bytes a weight


def test_triton_fp8_layout():
    from furca.kernels.dequant_matmul import fp8_matmul_ref
    from furca.runtime.quant.packed_triton import TritonFp8

    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(2))
    packed = TritonFp8(w, DEVICE)
    x = torch.randn(5, 96)
    got = packed.matmul(x.to(DEVICE)).cpu()
    assert torch.allclose(got, fp8_matmul_ref(x, packed.w).cpu(), atol=1e-4)
    assert ((packed.dequantize().cpu() - w).norm() / w.norm()) < 0.05  # e4m3: 3 mantissa bits
