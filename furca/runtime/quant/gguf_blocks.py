"""GGUF block types -> ``QuantGroups``: the codes and per-group scale/offset of a
llama.cpp quantized tensor, read from its raw bytes without any fp32 copy of the weight.

Contract: for every type in ``SUPPORTED``, ``to_groups(data, type, shape).dequantize()``
equals ``gguf.quants.dequantize(data, type)`` bit for bit: the per-group scale and
offset are computed with gguf-py's (and llama.cpp's) fp32 operations in the same order,
and ``QuantGroups.dequantize`` then does its ``scale * code + offset``.

| type | block (weights, bytes) | group | codes | w = |
|---|---|---|---|---|
| Q4_0 | 32, 18: d f16, 16 B nibbles | 32 | int8 -8..7 | d * q |
| Q4_1 | 32, 20: d f16, m f16, 16 B nibbles | 32 | uint8 0..15 | d * q + m |
| Q8_0 | 32, 34: d f16, 32 int8 | 32 | int8 | d * q |
| Q4_K | 256, 144: d, dmin f16, 12 B 6-bit sc/m, 128 B nibbles | 32 | uint8 0..15 | (d*sc) * q - dmin*m |
| Q5_K | 256, 176: as Q4_K + 32 B high bits | 32 | uint8 0..31 | (d*sc) * q - dmin*m |
| Q6_K | 256, 210: 128 B low nibbles, 64 B high 2 bits, 16 int8 sc, d f16 | 16 | int8 -32..31 | (d*sc) * q |

For the K types the offset is ``-(dmin * m)``: ``a - b`` and ``a + (-b)`` are the same
IEEE operation, so the sum stays exact. Symmetric types (Q4_0, Q8_0, Q6_K) have signed
codes and no offset. Nibble order inside a block follows ggml: byte j's low nibble is
weight j of a 32-run and its high nibble weight j + 16 (Q4_0/Q4_1), or the low nibbles
of 32 bytes make one sub-block and their high nibbles the next (K types).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch

from furca.errors import ModelLoadError, UnsupportedModelError
from furca.runtime.quant.groups import QuantGroups

_QK_K = 256
_NIBBLE_SHIFTS = np.array([0, 4], dtype=np.uint8)


def _f16(b: np.ndarray) -> np.ndarray:
    """Two bytes per row (n, 2) -> (n, 1) float32, as gguf-py widens fp16."""
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, run: int) -> np.ndarray:
    """(n, B) bytes -> (n, 2B) codes: each ``run`` bytes give ``run`` low nibbles, then
    their ``run`` high nibbles."""
    n = qs.shape[0]
    q = qs.reshape(n, -1, 1, run) >> _NIBBLE_SHIFTS.reshape(1, 1, 2, 1)
    return (q & np.uint8(0x0F)).reshape(n, -1)


def _q4_0(b: np.ndarray):
    d = _f16(b[:, :2])
    codes = (_nibbles(b[:, 2:], 16).astype(np.int8) - np.int8(8))
    return codes, d, None


def _q4_1(b: np.ndarray):
    d, m = _f16(b[:, :2]), _f16(b[:, 2:4])
    return _nibbles(b[:, 4:], 16), d, m


def _q8_0(b: np.ndarray):
    return np.ascontiguousarray(b[:, 2:]).view(np.int8), _f16(b[:, :2]), None


def _k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit sub-block scales and mins packed in Q4_K/Q5_K's 12 bytes."""
    s = scales.reshape(-1, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_scale_offset(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d, dmin = _f16(b[:, :2]), _f16(b[:, 2:4])
    sc, mn = _k_scale_min(b[:, 4:16])
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32))


def _q4_k(b: np.ndarray):
    scale, offset = _k_scale_offset(b)
    return _nibbles(b[:, 16:], 32), scale, offset


def _q5_k(b: np.ndarray):
    scale, offset = _k_scale_offset(b)
    n = b.shape[0]
    qh = b[:, 16:48].reshape(n, 1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)
    high = (qh & np.uint8(0x01)).reshape(n, -1)
    return _nibbles(b[:, 48:], 32) | (high << np.uint8(4)), scale, offset


def _q6_k(b: np.ndarray):
    n = b.shape[0]
    low = _nibbles(b[:, :128], 64)
    qh = b[:, 128:192].reshape(n, -1, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh & np.uint8(0x03)).reshape(n, -1)
    codes = (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)
    scale = _f16(b[:, 208:210]) * np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    return codes, scale, None


# type name -> (weights per block, bytes per block, group, bits, decoder)
_TYPES: dict[str, tuple[int, int, int, int, Callable]] = {
    "Q4_0": (32, 18, 32, 4, _q4_0),
    "Q4_1": (32, 20, 32, 4, _q4_1),
    "Q8_0": (32, 34, 32, 8, _q8_0),
    "Q4_K": (_QK_K, 144, 32, 4, _q4_k),
    "Q5_K": (_QK_K, 176, 32, 5, _q5_k),
    "Q6_K": (_QK_K, 210, 16, 6, _q6_k),
}
SUPPORTED: tuple[str, ...] = tuple(_TYPES)
# Float storage types: not quantized, the loader dequantizes them to fp32.
UNQUANTIZED: tuple[str, ...] = ("F32", "F16", "BF16")


def type_name(tensor_type) -> str:
    """A GGML type (``gguf.GGMLQuantizationType``, its int value or its name) as its name."""
    if isinstance(tensor_type, str):
        return tensor_type
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(int(tensor_type)).name
    except ValueError:
        return f"GGML type {int(tensor_type)}"


def to_groups(data: np.ndarray, tensor_type, shape: Sequence[int]) -> QuantGroups:
    """The raw bytes ``data`` of a GGUF tensor of a ``SUPPORTED`` type as ``QuantGroups``.

    ``shape`` is the weight's shape in row-major (numpy) order, ``(N, K)`` (any leading
    dims are folded into N; K must be a whole number of blocks); ``data`` holds its
    ``N * K / block`` blocks in any uint8 shape (a reader's memmap is fine: it is read,
    never kept). Raises ``UnsupportedModelError`` naming the type for any other type,
    ``ModelLoadError`` when the byte count does not match the shape."""
    name = type_name(tensor_type)
    if name not in _TYPES:
        kind = "is not quantized" if name in UNQUANTIZED else "is not supported"
        raise UnsupportedModelError(
            f"quantization {name} {kind} as a quantized weight (supported: {', '.join(SUPPORTED)})")
    block, nbytes, group, bits, decode = _TYPES[name]
    if not shape:
        raise ModelLoadError(f"a {name} tensor needs a shape with at least one dimension")
    k = int(shape[-1])
    n = math.prod(int(d) for d in shape[:-1])
    if k % block:
        raise ModelLoadError(f"{name} row length {k} is not a multiple of its block size {block}")
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if raw.size != n * (k // block) * nbytes:
        raise ModelLoadError(
            f"{name} tensor of shape {tuple(shape)} needs {n * (k // block) * nbytes} bytes, got {raw.size}")
    codes, scale, offset = decode(raw.reshape(-1, nbytes))
    return QuantGroups(
        codes=torch.from_numpy(np.ascontiguousarray(codes).reshape(n, k)),
        scale=torch.from_numpy(np.ascontiguousarray(scale, dtype=np.float32).reshape(n, k // group)),
        offset=None if offset is None else torch.from_numpy(
            np.ascontiguousarray(offset, dtype=np.float32).reshape(n, k // group)),
        group=group, bits=bits, source=name)
