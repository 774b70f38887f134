"""The numba kernel of the int8 group layout (imported only when numba is installed).

``group_matmul_rows(x, xsum, codes, scale, offset, out, lo, hi)`` computes, for the
weight rows n in [lo, hi) and every input row m:

    out[m, n] = sum_g scale[n, g] * dot(codes[n, g], x[m, g]) + offset[n, g] * xsum[m, g]

in fp32, where ``codes[n, g]`` is the g-th group of row n (int8 or uint8), ``x[m, g]``
the matching slice of x and ``xsum[m, g]`` its sum (computed by the caller; offset may be
a (N, 0) array: symmetric weights). Each weight row is widened to fp32 once into a
scratch row and then dotted with every x row, so the int -> float conversion is paid
once per weight, not once per (weight, input row). The kernel is serial and releases
the GIL; the caller splits rows between threads. Everything is at module level so
numba's on-disk cache hits in every process after the first (see cpu_decode_kernel).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", nogil=True)
def store_row(wide, bits, orow):
    """orow = the fp32 row ``wide`` (``bits``: its uint32 view), as fp32 or, for a uint16
    row, as bf16 bits rounded to nearest even."""
    if orow.itemsize == 4:
        for j in range(wide.shape[0]):
            orow[j] = wide[j]
    else:
        for j in range(wide.shape[0]):
            b = bits[j]
            orow[j] = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)


@njit(fastmath=True, nogil=True, cache=True)
def group_matmul_rows(x, xsum, codes, scale, offset, out, lo, hi):
    m_rows, k = x.shape
    groups = scale.shape[1]
    group = k // groups
    has_offset = offset.shape[1] > 0
    wide = np.empty(k, np.float32)
    for n in range(lo, hi):
        crow = codes[n]
        for j in range(k):
            wide[j] = np.float32(crow[j])
        for m in range(m_rows):
            xr = x[m]
            acc = np.float32(0.0)
            for g in range(groups):
                base = g * group
                s = np.float32(0.0)
                for j in range(group):
                    s += wide[base + j] * xr[base + j]
                acc += scale[n, g] * s
                if has_offset:
                    acc += offset[n, g] * xsum[m, g]
            out[m, n] = acc


@njit(fastmath=True, nogil=True, cache=True)
def dequant_rows(codes, scale, offset, out, lo, hi):
    """out[n] = scale[n, g] * codes[n] + offset[n, g] for rows n in [lo, hi); out is
    fp32, or uint16 holding bf16 bits (rounded to nearest even)."""
    k = codes.shape[1]
    groups = scale.shape[1]
    group = k // groups
    has_offset = offset.shape[1] > 0
    wide = np.empty(k, np.float32)
    bits = wide.view(np.uint32)
    for n in range(lo, hi):
        crow = codes[n]
        for g in range(groups):
            s = scale[n, g]
            o = offset[n, g] if has_offset else np.float32(0.0)
            for j in range(g * group, (g + 1) * group):
                wide[j] = s * np.float32(crow[j]) + o
        store_row(wide, bits, out[n])


@njit(fastmath=True, nogil=True, cache=True)
def dequant_int4pack_rows(blocks, scale_zero, out, lo, hi):
    """Rows [lo, hi) of torch's CPU int4 pack, dequantized: blocks (N / 64, K, 32) uint8
    with byte [b, k, d] = q[64 b + d, k] | q[64 b + d + 32, k] << 4, scale_zero
    (K / group, N, 2) fp32; out[n, k] = (q - 8) * scale + zero as fp32, or as bf16 bits
    (uint16, rounded to nearest even)."""
    k = blocks.shape[1]
    group = k // scale_zero.shape[0]
    wide = np.empty(k, np.float32)
    bits = wide.view(np.uint32)
    for n in range(lo, hi):
        b = n // 64
        d = n % 64
        shift = np.uint8(4) if d >= 32 else np.uint8(0)
        col = blocks[b, :, d % 32]
        for g in range(scale_zero.shape[0]):
            s = scale_zero[g, n, 0]
            z = scale_zero[g, n, 1] - np.float32(8.0) * s
            for j in range(g * group, (g + 1) * group):
                wide[j] = s * np.float32((col[j] >> shift) & np.uint8(15)) + z
        store_row(wide, bits, out[n])
