"""Quantized weights: formats on disk (GGUF blocks, AWQ / GPTQ), round-to-nearest
quantizers, the packed layouts furca computes from, and the quantized linear.

Every source of quantized weights produces one canonical form, ``QuantGroups``
(groups.py): one integer code per weight plus a scale and an optional offset per group
of consecutive weights along a row. Packing turns it into a compute layout
(packed.py), and ``QuantLinear`` (linear.py) computes from that. See docs/quantization.md.
"""

from furca.runtime.quant.groups import QuantGroups

__all__ = ["QuantGroups"]
