"""``QuantGroups``: the one form every quantized weight takes between its source and
its compute layout.

    w[n, k] = scale[n, k // group] * codes[n, k] + offset[n, k // group]

computed in fp32 in that order (a product, then a sum: the order llama.cpp's and
gguf-py's dequantizers use, so a GGUF tensor dequantizes bit-exactly). ``offset`` is
None for symmetric formats (w = scale * code). ``codes`` holds one code per weight,
unpacked: uint8 for unsigned codes (Q4_1's 0..15), int8 for signed ones (Q8_0's
-128..127); ``bits`` says how many bits the codes need. Row-wise operations
(``take_rows``, ``cat``) are exact, since groups never cross rows: the loader uses
them to undo llama.cpp's q/k row permutation and to fuse q/k/v and gate/up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QuantGroups:
    codes: torch.Tensor  # (N, K) uint8 or int8, CPU
    scale: torch.Tensor  # (N, K // group) float32
    offset: torch.Tensor | None  # (N, K // group) float32, or None: symmetric
    group: int
    bits: int
    source: str  # where the codes come from: "Q4_1", "Q8_0", "int4", "int8", "awq", "gptq", ...

    def __post_init__(self):
        n, k = self.codes.shape
        if self.codes.dtype not in (torch.uint8, torch.int8):
            raise ValueError(f"codes must be uint8 or int8, got {self.codes.dtype}")
        if self.group <= 0 or k % self.group:
            raise ValueError(f"group {self.group} does not divide the row length {k}")
        want = (n, k // self.group)
        for name in ("scale", "offset"):
            t = getattr(self, name)
            if t is not None and (tuple(t.shape) != want or t.dtype != torch.float32):
                raise ValueError(f"{name} must be float32 of shape {want}, got {t.dtype} {tuple(t.shape)}")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    @property
    def signed(self) -> bool:
        return self.codes.dtype == torch.int8

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight (N, K)."""
        n, k = self.codes.shape
        w = self.codes.to(torch.float32).view(n, k // self.group, self.group) * self.scale[..., None]
        if self.offset is not None:
            w = w + self.offset[..., None]
        return w.view(n, k)

    def take_rows(self, index: torch.Tensor) -> "QuantGroups":
        """The rows ``index`` (a permutation or a slice of rows), exactly."""
        off = None if self.offset is None else self.offset[index]
        return QuantGroups(self.codes[index], self.scale[index], off, self.group, self.bits, self.source)

    @staticmethod
    def cat(parts: "list[QuantGroups]") -> "QuantGroups":
        """Rows of ``parts`` stacked (the fused q/k/v or gate/up weight). The parts must
        agree on group, bits, signedness and whether they have an offset."""
        first = parts[0]
        for p in parts[1:]:
            if (p.group, p.bits, p.signed, p.offset is None, p.shape[1]) != (
                    first.group, first.bits, first.signed, first.offset is None, first.shape[1]):
                raise ValueError(f"cannot fuse {first.source} and {p.source} weights of different layouts")
        off = None if first.offset is None else torch.cat([p.offset for p in parts])
        return QuantGroups(torch.cat([p.codes for p in parts]), torch.cat([p.scale for p in parts]), off,
                           first.group, first.bits, first.source)
