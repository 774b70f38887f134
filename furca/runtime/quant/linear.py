"""The model's quantized parts: ``QuantLinear`` (a decoder projection computed from
packed weights) and ``QuantTable`` (a quantized embedding that is also the LM head),
and ``QuantPlan``, which says what a model quantizes.

A fused projection (q/k/v, gate/up) receives its shards one at a time during
``load_weights`` (``load_shard``): each is a ``QuantGroups`` (the file's own codes:
GGUF blocks, AWQ / GPTQ) or a float tensor, which the plan quantizes (round to
nearest, rtn.py) or keeps dense. When the last shard arrives the shards are fused
into one packed weight when their layouts agree, and kept as one packed weight each
otherwise (a Q4_K_M file stores v in Q6_K beside q and k in Q4_K); the outputs are
then concatenated, which is exact. No full-precision copy of a quantized weight is
ever held by the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from furca.errors import ModelLoadError
from furca.runtime.quant.groups import QuantGroups

METHODS = ("none", "int8", "int4", "fp8")  # what a float checkpoint's projections become
INT4_GROUPS = (32, 64, 128)


@dataclass(frozen=True)
class QuantPlan:
    """What a model quantizes. ``method``: "none" (float projections), "int8" (per output
    channel, symmetric), "int4" (group-wise, asymmetric, ``group`` weights per group) or
    "fp8" (e4m3, one scale per output channel; CUDA only) for the float tensors of the
    decoder projections; tensors that arrive quantized (``keep_file``: a GGUF file's own
    blocks, an AWQ / GPTQ checkpoint) keep their codes, and a quantized embedding stays
    quantized (it is the tied LM head too)."""

    method: str = "none"
    group: int = 32
    keep_file: bool = True

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"quantization method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.method == "int4" and self.group not in INT4_GROUPS:
            raise ValueError(f"int4 group size must be one of {INT4_GROUPS}, got {self.group}")

    @property
    def active(self) -> bool:
        """Whether any projection may hold packed weights (else the model is built as before)."""
        return self.method != "none" or self.keep_file

    def groups_of(self, tensor: torch.Tensor) -> QuantGroups | None:
        """A float shard quantized by the plan, or None to keep it dense."""
        from furca.runtime.quant import rtn

        if self.method == "int8":
            return rtn.quantize_int8(tensor.float())
        if self.method == "int4":
            return rtn.quantize_int4(tensor.float(), self.group)
        return None


class DenseWeight:
    """A float weight behind the packed-weight interface (a shard a plan keeps dense)."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        from furca.runtime.models.llama import linear

        return linear(x, self.weight)

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids].float()

    def dequantize(self) -> torch.Tensor:
        return self.weight.float()


class PermutedInput:
    """A packed weight whose columns are the input features in ``perm``'s order (GPTQ
    act-order, hf_formats.ActOrderGroups): ``y = inner(x[..., perm])``."""

    def __init__(self, inner, perm: torch.Tensor):
        self.inner, self.perm = inner, perm

    @property
    def shape(self) -> tuple[int, int]:
        return self.inner.shape

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes + self.perm.numel() * self.perm.element_size()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.matmul(x.index_select(-1, self.perm))

    def dequantize(self) -> torch.Tensor:
        return float_weight_from(self.inner.dequantize(), self.perm)


def float_weight_from(w: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    """``w``'s columns put back in input order (column j is input feature perm[j])."""
    if perm is None:
        return w
    out = torch.empty_like(w)
    out[:, perm] = w
    return out


def float_weight(weight: QuantGroups) -> torch.Tensor:
    """The fp32 weight of groups, columns in the checkpoint's input order."""
    return float_weight_from(weight.dequantize(), getattr(weight, "input_perm", None))


def pack(weight: QuantGroups | torch.Tensor, device, dense_dtype: torch.dtype, fp8: bool = False):
    """The compute layout of one weight on ``device``: packed.py's on the CPU, the Triton
    kernels' on CUDA (packed_triton.py); a float weight stays dense, or becomes fp8."""
    cuda = torch.device(device).type == "cuda"
    if isinstance(weight, QuantGroups):
        if cuda:
            from furca.runtime.quant.packed_triton import TritonPacked as pack_groups
        else:
            from furca.runtime.quant.packed import pack as pack_groups

        packed = pack_groups(weight, device)
        perm = getattr(weight, "input_perm", None)
        return packed if perm is None else PermutedInput(packed, perm.to(device))
    if fp8:
        from furca.runtime.quant.packed_triton import TritonFp8

        return TritonFp8(weight, device)
    return DenseWeight(weight.to(device=device, dtype=dense_dtype))


class QuantLinear(nn.Module):
    """``y = x @ W.T + b`` from packed weights; ``shard_sizes``: the output rows of each
    fused shard (one shard: a plain projection). Computed with x in ``dense_dtype`` (the
    model's ``linear_dtype``, as float projections are); ``y`` is in ``x``'s dtype."""

    def __init__(self, in_features: int, shard_sizes: tuple[int, ...], bias: bool, plan: QuantPlan,
                 dense_dtype: torch.dtype, bias_dtype: torch.dtype, device):
        super().__init__()
        self.in_features, self.shard_sizes = in_features, tuple(shard_sizes)
        self.plan, self.dense_dtype, self.device = plan, dense_dtype, device
        out = sum(self.shard_sizes)
        self.bias = nn.Parameter(torch.empty(out, dtype=bias_dtype, device=device),
                                 requires_grad=False) if bias else None
        self._pending: dict[int, QuantGroups | torch.Tensor] = {}
        self.packed: list = []
        self.sources: list[str] = []  # QuantGroups.source of the packed shards

    def load_shard(self, index: int, weight: QuantGroups | torch.Tensor, name: str) -> None:
        """Takes shard ``index``'s weight (checked against the layer's shape); packs the
        layer once every shard has arrived. Raises ModelLoadError on a wrong shape."""
        want = (self.shard_sizes[index], self.in_features)
        got = tuple(weight.shape)
        if got != want:
            raise ModelLoadError(f"tensor {name!r} has shape {got}, the model config expects {want}")
        if isinstance(weight, QuantGroups) and not self.plan.keep_file:
            weight = float_weight(weight)  # requantized by the plan's method, or kept dense
        if not isinstance(weight, QuantGroups):
            weight = self.plan.groups_of(weight) or weight
        self._pending[index] = weight
        if len(self._pending) == len(self.shard_sizes):
            self._pack([self._pending[i] for i in range(len(self.shard_sizes))])
            self._pending.clear()

    def _pack(self, shards: list) -> None:
        first = shards[0]
        if len(shards) > 1 and isinstance(first, QuantGroups) and all(type(s) is type(first) for s in shards):
            try:
                shards = [type(first).cat(shards)]
            except ValueError:  # different layouts: one packed weight per shard
                pass
        elif len(shards) > 1 and all(not isinstance(s, QuantGroups) for s in shards):
            shards = [torch.cat(shards)]
        self.packed = [pack(s, self.device, self.dense_dtype, fp8=self.plan.method == "fp8") for s in shards]
        self.sources = sorted({s.source for s in shards if isinstance(s, QuantGroups)}
                              | ({"fp8"} if self.plan.method == "fp8" else set()))

    @property
    def weight_nbytes(self) -> int:
        return sum(p.nbytes for p in self.packed)

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight (out, in): for tests and conversions, never on the hot path."""
        return torch.cat([p.dequantize() for p in self.packed])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In the projections' dtype (``linear_dtype``: the packed kernels take bf16 or fp32
        inputs), returned in x's."""
        xin = x if x.dtype == self.dense_dtype else x.to(self.dense_dtype)
        if len(self.packed) == 1:
            y = self.packed[0].matmul(xin)
        else:
            y = torch.cat([p.matmul(xin) for p in self.packed], dim=-1)
        y = y if y.dtype == x.dtype else y.to(x.dtype)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        kinds = ",".join(type(p).__name__ for p in self.packed) or "unloaded"
        return f"in={self.in_features}, shards={self.shard_sizes}, {kinds}"


class QuantTable(nn.Module):
    """A quantized (vocab, hidden) table: the token embedding (rows dequantized on lookup)
    and, tied or not, the LM head (``logits``: fp32, whatever the input's dtype)."""

    def __init__(self, num_rows: int, dim: int, weight: QuantGroups, device):
        super().__init__()
        if tuple(weight.shape) != (num_rows, dim):
            raise ModelLoadError(f"quantized table has shape {tuple(weight.shape)}, expected {(num_rows, dim)}")
        self.packed = pack(weight, device, torch.float32)
        self.sources = [weight.source]

    @property
    def weight_nbytes(self) -> int:
        return self.packed.nbytes

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        return self.packed.embedding(ids)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.packed.matmul(h.float()).float()

    def dequantize(self) -> torch.Tensor:
        return self.packed.dequantize()


def weight_nbytes(model: nn.Module) -> int:
    """Resident bytes of a model's weights: parameters, buffers and packed weights."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    for m in model.modules():
        if isinstance(m, (QuantLinear, QuantTable)):
            total += m.weight_nbytes
    return total


def quantization_summary(model: nn.Module) -> str:
    """"none", or the sources of the model's quantized weights joined by "+" in a stable
    order ("Q4_1+Q8_0", "int4", "awq")."""
    sources = set()
    for m in model.modules():
        if isinstance(m, (QuantLinear, QuantTable)):
            sources.update(m.sources)
    return "+".join(sorted(sources)) or "none"
