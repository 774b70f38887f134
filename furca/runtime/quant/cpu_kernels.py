"""The numba kernels of the CPU quantized layouts (imported only when numba is installed).

``group_matmul_rows(x, xsum, codes, scale, offset, out, lo, hi)`` computes, for the
weight rows n in [lo, hi) and every input row m:

    out[m, n] = sum_g scale[n, g] * dot(codes[n, g], x[m, g]) + offset[n, g] * xsum[m, g]

in fp32, where ``codes[n, g]`` is the g-th group of row n (int8 or uint8), ``x[m, g]``
the matching slice of x and ``xsum[m, g]`` its sum (computed by the caller; offset may be
a (N, 0) array: symmetric weights).

``dequant_rows`` (codes one byte each, (N, K)) and ``dequant_int4pack_cols`` (torch's
CPU int4 pack, written as the transposed weight (K, N)) dequantize a weight for the
large-M path, to fp32 or to bf16 bits (uint16, rounded to nearest even).

Vectorization (what LLVM needs to emit packed AVX code here): every hot loop is an
innermost zero-based ``range(n)`` over contiguous elements (``a[base + j]``), with a trip
count known only at run time. A ``range(start, stop)`` group loop gets a single
non-interleaved vector body (dequantization 2-3x slower); a stepped ``range`` or a
fixed-length inner loop (``range(16)``) is unrolled and left scalar (about 10x slower);
a per-element group index (``j // group``) defeats it too. The matmul therefore takes one
long dot per (weight row, x row), one horizontal sum per row rather than per group: for
one x row, x scaled by the row's group scales into a scratch row (``xs[j] = x[j] *
scale[g]``), then ``dot(code, xs)``; for more x rows each weight row is widened once,
scale folded in (``wide[j] = code[j] * scale[g]``), four rows at a time so each x element
is loaded once per four dots (measured per M in bench/quant_linear.py). The int4 pack
stores 64 rows interleaved along K (byte [b, k, d] holds rows 64 b + d and 64 b + d +
32), so it is dequantized into the transposed weight, where the 64 rows of a column are
contiguous; F.linear takes the transposed view as it is (BLAS reads either layout).
Scratch arrays are never viewed under a second dtype inside a hot kernel except for the
bf16 rounding (``bits``): such views make LLVM assume aliasing and halve the speed.

The kernels are serial and release the GIL; the caller splits rows between threads.
Everything is at module level with ``cache=True`` so numba's on-disk cache hits in
every process after the first.
"""

from __future__ import annotations

import numpy as np
from numba import carray, cfunc, njit

from furca.runtime.numba_cache import link_sources
from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, claim

link_sources(__file__, "furca.runtime.omp_team_kernel")  # its intrinsics are compiled into ours

_ROWS = 4  # weight rows widened and dotted together by group_matmul_rows
_OPTS = dict(fastmath=True, nogil=True, cache=True, boundscheck=False, error_model="numpy")


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


@njit(inline="always", nogil=True)
def widen_row(crow, srow, orow, wide):
    """wide = crow * scale per group (+ offset per group when orow has entries)."""
    groups = srow.shape[0]
    group = crow.shape[0] // groups
    if orow.shape[0] > 0:
        for g in range(groups):
            s, o, base = srow[g], orow[g], g * group
            for j in range(group):
                wide[base + j] = s * np.float32(crow[base + j]) + o
    else:
        for g in range(groups):
            s, base = srow[g], g * group
            for j in range(group):
                wide[base + j] = s * np.float32(crow[base + j])


@njit(inline="always", nogil=True)
def dot(a, b):
    acc = np.float32(0.0)
    for j in range(a.shape[0]):
        acc += a[j] * b[j]
    return acc


@njit(inline="always", nogil=True)
def scale_groups(xr, srow, xs):
    """xs[j] = xr[j] * srow[g] for the weights j of group g."""
    groups = srow.shape[0]
    group = xr.shape[0] // groups
    for g in range(groups):
        s, base = srow[g], g * group
        for j in range(group):
            xs[base + j] = xr[base + j] * s


@njit(**_OPTS)
def group_matmul_rows(x, xsum, codes, scale, offset, out, lo, hi):
    m_rows, k = x.shape
    if m_rows == 1:  # one x row: x scaled by the row's group scales, then one dot with the codes
        xr, xs = x[0], np.empty(k, np.float32)
        for n in range(lo, hi):
            scale_groups(xr, scale[n], xs)
            crow = codes[n]
            acc = np.float32(0.0)
            for j in range(k):
                acc += np.float32(crow[j]) * xs[j]
            out[0, n] = acc + dot(offset[n], xsum[0])
        return
    none = np.zeros((1, 0), np.float32)[0]  # widen without the offset: it enters through xsum
    w0, w1, w2, w3 = np.empty(k, np.float32), np.empty(k, np.float32), np.empty(k, np.float32), np.empty(k, np.float32)
    n = lo
    while n + _ROWS <= hi:
        widen_row(codes[n], scale[n], none, w0)
        widen_row(codes[n + 1], scale[n + 1], none, w1)
        widen_row(codes[n + 2], scale[n + 2], none, w2)
        widen_row(codes[n + 3], scale[n + 3], none, w3)
        for m in range(m_rows):
            xr = x[m]
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for j in range(k):
                xv = xr[j]
                a0 += w0[j] * xv
                a1 += w1[j] * xv
                a2 += w2[j] * xv
                a3 += w3[j] * xv
            out[m, n], out[m, n + 1], out[m, n + 2], out[m, n + 3] = a0, a1, a2, a3
            if offset.shape[1] > 0:
                for r in range(_ROWS):
                    out[m, n + r] += dot(offset[n + r], xsum[m])
        n += _ROWS
    while n < hi:
        widen_row(codes[n], scale[n], none, w0)
        for m in range(m_rows):
            out[m, n] = dot(w0, x[m]) + dot(offset[n], xsum[m])
        n += 1


@njit(inline="always", nogil=True)
def _group_matmul_parts(pargs, a, codes):
    """The parts of `group_matmul_rows` this thread claims: ``a`` (``pargs``' array) = [counter, parts, m, k,
    n, groups, offset groups, x, xsum, codes, scale, offset, out] (sizes and addresses)."""
    parts, m, k, n, groups, off_groups = a[1], a[2], a[3], a[4], a[5], a[6]
    x = carray(as_ptr(a[7]), (m, k), np.float32)
    xsum = carray(as_ptr(a[8]), (m, groups), np.float32)
    scale = carray(as_ptr(a[10]), (n, groups), np.float32)
    offset = carray(as_ptr(a[11]), (n, off_groups), np.float32)
    out = carray(as_ptr(a[12]), (m, n), np.float32)
    p = claim(pargs)
    while p < parts:
        group_matmul_rows(x, xsum, codes, scale, offset, out, n * p // parts, n * (p + 1) // parts)
        p = claim(pargs)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def group_matmul_team_i8(pargs):
    """`group_matmul_rows` over int8 codes, run by every thread of an OpenMP team."""
    a = carray(pargs, 13)
    _group_matmul_parts(pargs, a, carray(as_ptr(a[9]), (a[4], a[3]), np.int8))


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def group_matmul_team_u8(pargs):
    """`group_matmul_rows` over uint8 codes, run by every thread of an OpenMP team."""
    a = carray(pargs, 13)
    _group_matmul_parts(pargs, a, carray(as_ptr(a[9]), (a[4], a[3]), np.uint8))


@njit(**_OPTS)
def dequant_rows(codes, scale, offset, out, lo, hi):
    """out[n] = scale[n, g] * codes[n] + offset[n, g] for rows n in [lo, hi); out is
    fp32, or uint16 holding bf16 bits (rounded to nearest even)."""
    wide = np.empty(codes.shape[1], np.float32)
    bits = wide.view(np.uint32)
    for n in range(lo, hi):
        if out.itemsize == 4:  # fp32: straight into the output
            widen_row(codes[n], scale[n], offset[n], out[n])
        else:
            widen_row(codes[n], scale[n], offset[n], wide)
            store_row(wide, bits, out[n])


@njit(**_OPTS)
def dequant_int4pack_cols(blocks, scale_zero, out_t, lo, hi):
    """Row blocks [lo, hi) (2 h weight rows each) of torch's CPU int4 pack, dequantized
    into the transposed weight: blocks (N / 2h, K, h) uint8 with byte [b, k, d] =
    q[2h b + d, k] | q[2h b + d + h, k] << 4 (h = 32 where torch was built for AVX-512,
    16 on AVX2: packed._int4pack_half), scale_zero (K / group, N, 2) fp32;
    out_t[k, n] = (q - 8) * scale + zero, out_t (K, N) fp32 or uint16 (bf16 bits,
    rounded to nearest even)."""
    k = blocks.shape[1]
    h = blocks.shape[2]
    w = 2 * h
    groups = scale_zero.shape[0]
    group = k // groups
    sc = np.empty(w, np.float32)
    ze = np.empty(w, np.float32)
    wide = np.empty(w, np.float32)
    bits = wide.view(np.uint32)
    for b in range(lo, hi):
        n0 = b * w
        cb = blocks[b]
        for g in range(groups):
            szg = scale_zero[g]
            for d in range(w):
                s = szg[n0 + d, 0]
                sc[d] = s
                ze[d] = szg[n0 + d, 1] - np.float32(8.0) * s
            for j in range(group):
                row = cb[g * group + j]
                o = out_t[g * group + j, n0:n0 + w]
                if o.itemsize == 4:  # fp32: straight into the output
                    for d in range(h):
                        o[d] = sc[d] * np.float32(np.int32(row[d]) & 15) + ze[d]
                    for d in range(h):
                        o[d + h] = sc[d + h] * np.float32(np.int32(row[d]) >> 4) + ze[d + h]
                else:  # bf16: through the fp32 scratch, rounded
                    for d in range(h):
                        wide[d] = sc[d] * np.float32(np.int32(row[d]) & 15) + ze[d]
                    for d in range(h):
                        wide[d + h] = sc[d + h] * np.float32(np.int32(row[d]) >> 4) + ze[d + h]
                    store_row(wide, bits, o)
