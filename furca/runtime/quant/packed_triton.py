"""The compute layouts of quantized weights on CUDA: the Triton kernels of
``furca.kernels.dequant_matmul`` behind the packed-weight interface the model calls
(``matmul``, ``embedding``, ``dequantize``, ``nbytes``, ``shape``; packed.py is the
CPU side).

``TritonPacked(groups, device)``: 4-bit codes in groups of 32 / 64 / 128 go to the
int4 kernel, every other code width (and 4-bit codes in other groups) to the int8
kernel, per channel or in groups of 16-128; packing is lossless (dequant_pack.py).
``TritonFp8(weight, device)``: an fp32 / bf16 weight quantized to e4m3 with one scale
per output row (``quantization="fp8"``; sm_89 or newer). The layouts hold ``w^T``, so a
row of the weight (an embedding row) is a column of theirs: ``embedding`` dequantizes
just the columns of the ids.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from furca.runtime.quant.groups import QuantGroups

_INT4_GROUPS = (32, 64, 128)


class _TritonLayout:
    """What the int4 / int8 / fp8 layouts share: ``self.w`` is a dequant_pack.PackedWeight."""

    w = None  # set by the subclass
    _kernel = None  # int4_matmul / int8_matmul / fp8_matmul

    @property
    def shape(self) -> tuple[int, int]:
        return (self.w.n, self.w.k)

    @property
    def nbytes(self) -> int:
        return self.w.nbytes

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        return self._kernel(x.reshape(-1, x.shape[-1]), self.w).reshape(*lead, self.w.n)

    def dequantize(self) -> torch.Tensor:
        from furca.kernels.dequant_pack import dequantize

        return dequantize(self.w)

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of the weight, fp32, dequantized from their columns alone."""
        from furca.kernels.dequant_pack import dequantize

        w, flat = self.w, ids.reshape(-1)
        sub = replace(w, qweight=w.qweight[:, flat], scale=w.scale[:, flat],
                      zero=None if w.zero is None else w.zero[:, flat], n=flat.numel())
        return dequantize(sub).reshape(*ids.shape, w.k)


class TritonPacked(_TritonLayout):
    def __init__(self, groups: QuantGroups, device):
        from furca.kernels import dequant_matmul as dm
        from furca.kernels.dequant_pack import pack_int4, pack_int8

        if groups.bits <= 4 and groups.group in _INT4_GROUPS:
            self.w, self._kernel = pack_int4(groups).to(device), dm.int4_matmul
        else:
            self.w, self._kernel = pack_int8(groups).to(device), dm.int8_matmul


class TritonFp8(_TritonLayout):
    def __init__(self, weight: torch.Tensor, device):
        from furca.kernels.dequant_matmul import fp8_matmul
        from furca.kernels.dequant_pack import pack_fp8, quantize_fp8

        self.w = pack_fp8(*quantize_fp8(weight.float())).to(device)
        self._kernel = fp8_matmul
