"""AWQ and GPTQ checkpoints in HF format -> ``QuantGroups``.

A checkpoint quantized by AutoAWQ or AutoGPTQ / GPTQModel carries
``quantization_config`` in config.json and, per quantized linear (N outputs, K inputs),
``<prefix>.qweight`` / ``.qzeros`` (int32 words of packed codes), ``.scales`` (fp16)
and, for GPTQ, ``.g_idx`` (int32, the group of each input feature) instead of
``<prefix>.weight``. Codes are unsigned, ``bits`` wide, packed low bits first, and the
weight is ``(q - z) * s``. The layouts, as the tools write them:

| format | qweight | qzeros | scales | packed along | order in a word |
|---|---|---|---|---|---|
| AWQ gemm | (K, N/8) | (K/g, N/8) | (K/g, N) | output | columns 0 2 4 6 1 3 5 7 |
| AWQ gemv | (N, K/8) | (N, W) | (N, 8W) | input | sequential |
| GPTQ | (K/p, N) | (K/g, N/p) | (K/g, N) | input (zeros: output) | sequential |

(p = 32 / bits codes per word; gemv pads its zero/scale columns to W words, W >= K/g.)
GPTQ's ``format`` (``checkpoint_format`` in older configs) "gptq" is the v1 format:
zeros are stored minus one, applied to the whole packed word (GPTQModel subtracts
0x11111111 from each int32 on export and adds it back on load, so a borrow across
codes is undone exactly, as GPTQModel's own torch reference reads it); "gptq_v2" stores
them as they are. AutoGPTQ's asymmetric packer ORs a zero of 0 in as -1, which sets
every bit of its word: that word's other zeros are lost on disk, and readers differ on
it (per-code +1 readers recover the 0s, this word-wise one does not); symmetric
checkpoints (every zero 8, stored 7) read the same either way. ``g_idx[k]`` names the
group of input feature k; with ``desc_act`` (act-order) it is not ``k // g``.

Exactness: every function returns groups in furca's (N out, K in) orientation with
``scale = s`` and ``offset = -(z * s)`` in fp32. For fp16 or bf16 scales (what the
tools write) ``s * q``, ``z * s`` and their sum ``s * (q - z)`` all fit fp32's 24-bit
significand, so ``dequantize()`` equals the exact ``(q - z) * s`` bit for bit (the
tools' fp16 reference is that value rounded to fp16). For fp32 scales the sum may round:
within one ulp of ``(2**bits - 1) * |s|``. GPTQ with ``sym`` and every zero at
``2**(bits-1)`` gives signed codes ``q - 2**(bits-1)`` and no offset.

Act-order: QuantGroups needs each group's weights consecutive along K, so GPTQ codes
are reordered by ``perm = argsort(g_idx)`` (stable) and returned as ``ActOrderGroups``,
whose ``input_perm`` is that order: ``y = x[..., input_perm] @ groups.dequantize().T``.
q/k/v (and gate/up) of one layer see the same input, so GPTQ gives them the same act
order and they fuse; ``ActOrderGroups.cat`` checks that their ``input_perm`` agree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.quant.groups import QuantGroups

assert sys.byteorder == "little", "packed words are read through their little-endian bytes"
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ gemm: code j of a word is column AWQ_ORDER[j]
_AWQ_COLUMN = torch.tensor([AWQ_ORDER.index(c) for c in range(8)])  # column c -> code
_BITS = {"awq": (4,), "gptq": (4, 8)}
_VERSIONS = {"awq": ("gemm", "gemv"), "gptq": ("gptq", "gptq_v2")}
_PARTS = {"awq": ("qweight", "qzeros", "scales"), "gptq": ("qweight", "qzeros", "scales", "g_idx")}


@dataclass(frozen=True)
class QuantSpec:
    """A checkpoint's ``quantization_config``. ``group_size`` -1: one group per row.
    ``version``: AWQ's packing ("gemm" / "gemv"); GPTQ's checkpoint format ("gptq": v1,
    zeros stored minus one; "gptq_v2"). ``sym``/``zero_point`` are each other's negation."""

    method: str
    bits: int
    group_size: int
    desc_act: bool = False
    sym: bool = False
    zero_point: bool = True
    version: str = ""  # "": the method's first: "gemm" / "gptq"

    def __post_init__(self):
        def unsupported(field, value, supported):
            raise UnsupportedModelError(
                f"quantization_config.{field} = {value!r} is not supported for {self.method} "
                f"(supported: {', '.join(map(str, supported))})")

        if self.method not in _BITS:
            raise UnsupportedModelError(f"quantization_config.quant_method = {self.method!r} is not "
                                        "supported (supported: awq, gptq)")
        if not self.version:
            object.__setattr__(self, "version", _VERSIONS[self.method][0])
        if self.bits not in _BITS[self.method]:
            unsupported("bits", self.bits, _BITS[self.method])
        if self.version not in _VERSIONS[self.method]:
            unsupported("version" if self.method == "awq" else "format", self.version, _VERSIONS[self.method])
        if self.method == "awq" and not self.zero_point:
            unsupported("zero_point", False, [True])
        if type(self.group_size) is not int or not (self.group_size > 0 or self.group_size == -1):
            raise ModelLoadError(f"quantization_config.group_size = {self.group_size!r} is not a positive "
                                 "integer or -1")


def _get(qc: dict, *keys, default=None):
    for k in keys:
        if qc.get(k) is not None:
            return qc[k]
    return default


# Older checkpoints keep the quantization config beside config.json: AutoGPTQ writes
# quantize_config.json, AutoAWQ quant_config.json; neither always names its method.
SEPARATE_CONFIG_FILES = {"quantize_config.json": "gptq", "quant_config.json": "awq"}


def separate_quantization_config(model_dir, read_json) -> dict | None:
    """``{"quantization_config": ...}`` from an older checkpoint's own file
    (``SEPARATE_CONFIG_FILES``; the method its writer implies where the file names none),
    or None when the directory has neither file."""
    for name, method in SEPARATE_CONFIG_FILES.items():
        path = model_dir / name
        if path.is_file():
            qc = read_json(path)
            if not isinstance(qc, dict):
                raise ModelLoadError(f"{path} must hold a JSON object, got {type(qc).__name__}")
            return {"quantization_config": {"quant_method": method, **qc}}
    return None


def parse_quantization_config(cfg: dict) -> QuantSpec | None:
    """The ``quantization_config`` of a config.json dict, or None when there is none.
    Accepts the spellings AutoAWQ (``w_bit``, ``q_group_size``, ``version``), transformers
    (``format``) and AutoGPTQ (``checkpoint_format``) write. Raises UnsupportedModelError
    naming the field and value for anything but 4-bit AWQ (gemm / gemv, with zero point)
    and 4- / 8-bit GPTQ (v1 / v2, int32 words)."""
    qc = cfg.get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ModelLoadError(f"quantization_config must be an object, got {type(qc).__name__}")
    method = str(qc.get("quant_method", "")).lower()
    if method == "gptq":
        if qc.get("is_marlin_format"):
            raise UnsupportedModelError("quantization_config.is_marlin_format = True is not supported for gptq")
        if _get(qc, "pack_dtype", default="int32") != "int32":
            raise UnsupportedModelError(f"quantization_config.pack_dtype = {qc['pack_dtype']!r} is not "
                                        "supported for gptq (supported: int32)")
        sym = bool(qc.get("sym", True))
        return QuantSpec("gptq", _get(qc, "bits"), _get(qc, "group_size", default=128),
                         desc_act=bool(qc.get("desc_act", False)), sym=sym, zero_point=not sym,
                         version=str(_get(qc, "format", "checkpoint_format", default="gptq")).lower())
    if method == "awq":
        zero_point = bool(qc.get("zero_point", True))
        return QuantSpec("awq", _get(qc, "bits", "w_bit"), _get(qc, "group_size", "q_group_size", default=128),
                         sym=not zero_point, zero_point=zero_point,
                         version=str(_get(qc, "version", "format", default="gemm")).lower())
    raise UnsupportedModelError(f"quantization_config.quant_method = {method!r} is not supported "
                                "(supported: awq, gptq)")


@dataclass(frozen=True)
class ActOrderGroups(QuantGroups):
    """GPTQ act-order groups: column j of ``codes`` is input feature ``input_perm[j]`` of
    the checkpoint's linear, so ``y = x[..., input_perm] @ self.dequantize().T``.
    ``input_perm``: (K,) int64, a permutation."""

    input_perm: torch.Tensor

    def take_rows(self, index: torch.Tensor) -> "ActOrderGroups":
        g = super().take_rows(index)
        return ActOrderGroups(g.codes, g.scale, g.offset, g.group, g.bits, g.source, self.input_perm)

    @staticmethod
    def cat(parts: "list[QuantGroups]") -> "ActOrderGroups":
        """Rows stacked; every part must be ActOrderGroups with the same ``input_perm``."""
        perm = parts[0].input_perm
        if not all(isinstance(p, ActOrderGroups) and torch.equal(p.input_perm, perm) for p in parts):
            raise ValueError("cannot fuse act-order weights whose input orders differ")
        g = QuantGroups.cat(parts)
        return ActOrderGroups(g.codes, g.scale, g.offset, g.group, g.bits, g.source, perm)


def _check(name: str, t: torch.Tensor, shape: tuple, dtypes: tuple) -> None:
    if t.dtype not in dtypes or tuple(t.shape) != shape:
        raise ModelLoadError(f"{name} must be {'/'.join(str(d).removeprefix('torch.') for d in dtypes)} "
                             f"of shape {shape}, got {str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}")


def _codes(words: torch.Tensor, bits: int) -> torch.Tensor:
    """(R, C) int32 words -> (R, C, 32 / bits) uint8 codes, [..., j] from bits
    [j*bits, (j+1)*bits). Reads the words' little-endian bytes (byte i: bits 8i..8i+7),
    so codes never widen past a byte."""
    r, c = words.shape
    b = words.contiguous().view(torch.uint8).view(r, c, 4)
    return torch.stack((b & 15, b >> 4), dim=-1).view(r, c, 8) if bits == 4 else b


def _groups(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group: int, bits: int,
            source: str, symmetric: bool) -> QuantGroups:
    """codes (N, K) uint8, zeros and scales (N, K/group) -> w = s * q + (-(z * s))."""
    scale = scales.to(torch.float32).contiguous()
    half = 2 ** (bits - 1)
    if symmetric and bool((zeros == half).all()):
        return QuantGroups((codes.to(torch.int16) - half).to(torch.int8), scale, None, group, bits, source)
    return QuantGroups(codes, scale, -(zeros.to(torch.float32) * scale), group, bits, source)


def _group(spec: QuantSpec, k: int, name: str) -> int:
    group = k if spec.group_size == -1 else spec.group_size
    if k % group:
        raise ModelLoadError(f"{name}: group_size {group} does not divide the input size {k}")
    return group


_SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def unpack_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, spec: QuantSpec,
               name: str = "weight") -> QuantGroups:
    """An AWQ linear's tensors (gemm or gemv layout, per ``spec.version``) -> its groups
    (N, K), unsigned codes with an offset. ``name`` prefixes error messages."""
    if spec.version == "gemv":
        n, k = qweight.shape[0], qweight.shape[1] * 8
        group = _group(spec, k, name)
        width = qzeros.shape[1]
        if width * 8 < k // group:
            raise ModelLoadError(f"{name}.qzeros has {width} words per row, fewer than {k // group} groups")
        _check(f"{name}.qzeros", qzeros, (n, width), (torch.int32,))
        _check(f"{name}.scales", scales, (n, width * 8), _SCALE_DTYPES)
        codes = _codes(qweight, 4).reshape(n, k)
        zeros = _codes(qzeros, 4).reshape(n, -1)[:, :k // group]
        return _groups(codes, zeros, scales[:, :k // group], group, 4, "awq", symmetric=False)
    k, n = qweight.shape[0], qweight.shape[1] * 8
    group = _group(spec, k, name)
    _check(f"{name}.qzeros", qzeros, (k // group, n // 8), (torch.int32,))
    _check(f"{name}.scales", scales, (k // group, n), _SCALE_DTYPES)

    def unpack_columns(words):  # (rows, N/8) -> (N, rows): column 8c + m is code _AWQ_COLUMN[m] of word c
        words = words.t().contiguous()  # transposed as words, 8x fewer elements than codes
        return torch.stack([((words >> 4 * j) & 15).to(torch.uint8) for j in _AWQ_COLUMN.tolist()],
                           dim=1).view(n, -1)

    return _groups(unpack_columns(qweight), unpack_columns(qzeros), scales.t(), group, 4, "awq", symmetric=False)


def unpack_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor | None,
                spec: QuantSpec, name: str = "weight") -> QuantGroups:
    """A GPTQ linear's tensors -> its groups (N, K): ``ActOrderGroups`` when ``g_idx``
    is not ``k // group`` (act-order), plain QuantGroups otherwise. ``g_idx`` None means
    ``k // group``. Each group must hold exactly ``group`` input features."""
    per = 32 // spec.bits
    k, n = qweight.shape[0] * per, qweight.shape[1]
    group = _group(spec, k, name)
    n_groups = k // group
    _check(f"{name}.qzeros", qzeros, (n_groups, n // per), (torch.int32,))
    _check(f"{name}.scales", scales, (n_groups, n), _SCALE_DTYPES)
    words = qzeros
    if spec.version == "gptq":  # v1: every code of the word stored minus one
        ones = sum(1 << (spec.bits * j) for j in range(per))
        words = (qzeros.to(torch.int64) + ones) & 0xFFFFFFFF
        words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    zeros = _codes(words, spec.bits).reshape(n_groups, n).t()
    codes = _codes(qweight, spec.bits).permute(1, 0, 2).reshape(n, k)  # input row p*r + j: code j of word r
    perm = None
    if g_idx is not None:
        _check(f"{name}.g_idx", g_idx, (k,), (torch.int32, torch.int64))
        in_order = torch.arange(k) // group
        if not torch.equal(g_idx.to(torch.int64), in_order):
            perm = torch.argsort(g_idx.to(torch.int64), stable=True)
            if not torch.equal(g_idx.to(torch.int64)[perm], in_order):
                raise ModelLoadError(f"{name}.g_idx must put exactly {group} input features in each of "
                                     f"its {n_groups} groups")
            codes = codes.index_select(1, perm)
    g = _groups(codes, zeros, scales.t(), group, spec.bits, "gptq", symmetric=spec.sym)
    if perm is None:
        return g
    return ActOrderGroups(g.codes, g.scale, g.offset, g.group, g.bits, g.source, perm)


def _unpack_parts(prefix: str, parts: dict, spec: QuantSpec) -> QuantGroups:
    for part in ("qweight", "qzeros"):
        if parts[part].dtype != torch.int32 or parts[part].dim() != 2:
            raise ModelLoadError(f"{prefix}.{part} must be a 2-D int32 tensor, got "
                                 f"{str(parts[part].dtype).removeprefix('torch.')} {tuple(parts[part].shape)}")
    if spec.method == "awq":
        return unpack_awq(parts["qweight"], parts["qzeros"], parts["scales"], spec, name=prefix)
    return unpack_gptq(parts["qweight"], parts["qzeros"], parts["scales"], parts.get("g_idx"), spec, name=prefix)


def iter_quantized(tensors: Iterable[tuple[str, torch.Tensor]], spec: QuantSpec
                   ) -> Iterator[tuple[str, torch.Tensor | QuantGroups]]:
    """Regroup a checkpoint's tensor stream: each linear's qweight / qzeros / scales
    (/ g_idx) come out as one ``("<prefix>.weight", QuantGroups)`` as soon as its last
    part has arrived (parts may be spread over shards, in any order); every other tensor
    passes through unchanged. A GPTQ linear without ``g_idx`` is taken as ``k // group``
    unless ``desc_act``. Missing parts raise ModelLoadError naming the tensor."""
    names = _PARTS[spec.method]
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        prefix, _, part = name.rpartition(".")
        if part not in names:
            yield name, tensor
            continue
        parts = pending.setdefault(prefix, {})
        parts[part] = tensor
        if len(parts) == len(names):
            yield f"{prefix}.weight", _unpack_parts(prefix, pending.pop(prefix), spec)
    for prefix, parts in pending.items():
        missing = [p for p in names if p not in parts]
        if missing == ["g_idx"] and not spec.desc_act:
            yield f"{prefix}.weight", _unpack_parts(prefix, parts, spec)
            continue
        raise ModelLoadError(f"{prefix}.{missing[0]} is missing from the checkpoint "
                             f"({spec.method} needs {', '.join(f'{prefix}.{p}' for p in names)})")
