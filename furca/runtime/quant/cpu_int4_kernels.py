"""numba kernels of furca's own int4 layout, ``Int4Cols`` (imported only when numba is installed).

The layout stores the weight (N, K) transposed, so that a matvec vectorizes over output
rows: ``codes`` (K, H) uint8 with H = N / 2 and byte [k, d] = q[d, k] | q[d + H, k] << 4
(row d in the low nibble, row d + H in the high one), and per group of ``group``
consecutive k one (scale, offset) pair per row as fp16 bits, ``scale`` / ``offset``
(K / group, N): w[n, k] = scale[g, n] * q[n, k] + offset[g, n]. fp16 holds a GGUF Q4_0 /
Q4_1 block's ``d`` and ``m`` exactly.

``int4_cols_matmul(x, xsum, codes, scale, offset, out, lo, hi)`` writes, for the groups
[lo, hi) and every x row m, the partial sum

    out[m, n] = sum_{g in [lo, hi)} scale[g, n] * sum_{k in g} q[n, k] * x[m, k] + offset[g, n] * xsum[m, g]

in fp32 (``xsum[m, g]`` the sum of x over group g, computed by the caller). Each group's
inner sum is a zero-based contiguous loop over all H byte columns per four k (``acc[d] +=
x[k] * float(nibble) + ...``: one load and store of each accumulator per four k), the form
LLVM vectorizes (cpu_kernels.py's docstring); the scale and offset enter once per group.
``int4_cols_team`` runs it on torch's OpenMP team (``omp_team``), the groups split in
parts claimed from a counter, so each thread streams a contiguous run of the codes.

What LLVM makes of it (``int4_cols_matmul.inspect_asm``): 256-bit ymm code (LLVM's
preferred vector width on this CPU), per 8 weights a zero-extension (vpmovzxbd), an int
-> float conversion (vcvtdq2ps) and an FMA, the nibbles split by vpand / vgf2p8affineqb;
no integer dot products (vpdpbusd / vpmaddubsw: x stays fp32). numba's own int -> float
conversion widens to int64 first (vcvtqq2ps on half-width vectors), hence ``nibble_f32``.
A layout of 64-row blocks (torch's) gave 32-byte inner loops whose per-loop set-up
(runtime alias checks) cost about as much as their bodies: twice slower on one thread.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.extending import intrinsic

from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, claim

_OPTS = dict(fastmath=True, nogil=True, cache=True, boundscheck=False, error_model="numpy")
LOW_NIBBLE, _SHIFT = np.uint32(15), np.uint32(4)
_TWO_112 = np.float32(2.0 ** 112)  # fp16 -> fp32 exponent rebias (15 -> 127)


@intrinsic
def f32_bits(typingctx, u):
    """The uint32 ``u`` reinterpreted as a float32 (a register bitcast, vectorizable)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@intrinsic
def nibble_f32(typingctx, u):
    """The uint32 ``u`` (a code below 2^31) as a float32, converted from 32 bits (numba's
    own int -> float conversion widens to int64 first: vcvtqq2ps on half-width vectors)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.sitofp(args[0], ir.FloatType())

    return sig, codegen


@njit(inline="always", nogil=True)
def half_to_f32(h, out):
    """out[j] = the fp16 bits h[j] as fp32: exact for normals, subnormals and zeros (the
    magnitude's bits shifted into fp32 place, then the exponent rebiased by 2^112)."""
    for j in range(h.shape[0]):
        b = np.uint32(h[j])
        f = f32_bits((b & np.uint32(0x7FFF)) << np.uint32(13)) * _TWO_112
        out[j] = -f if b & np.uint32(0x8000) else f


@njit(**_OPTS)
def int4_cols_matmul(x, xsum, codes, scale, offset, out, lo, hi):
    m_rows, k = x.shape
    h = codes.shape[1]
    group = k // scale.shape[0]
    acc_lo, acc_hi = np.empty(h, np.float32), np.empty(h, np.float32)
    s_lo, s_hi = np.empty(h, np.float32), np.empty(h, np.float32)
    o_lo, o_hi = np.zeros(h, np.float32), np.zeros(h, np.float32)
    for m in range(m_rows):
        orow = out[m]
        for d in range(2 * h):
            orow[d] = np.float32(0.0)
    for g in range(lo, hi):
        half_to_f32(scale[g, :h], s_lo)
        half_to_f32(scale[g, h:], s_hi)
        if offset.shape[0] > 0:
            half_to_f32(offset[g, :h], o_lo)
            half_to_f32(offset[g, h:], o_hi)
        k0 = g * group
        for m in range(m_rows):
            xr = x[m]
            for d in range(h):
                acc_lo[d] = np.float32(0.0)
                acc_hi[d] = np.float32(0.0)
            for j in range(group // 4):  # four k a pass: each acc element loaded and stored once per 4 k
                kk = k0 + 4 * j
                x0, x1, x2, x3 = xr[kk], xr[kk + 1], xr[kk + 2], xr[kk + 3]
                r0, r1, r2, r3 = codes[kk], codes[kk + 1], codes[kk + 2], codes[kk + 3]
                for d in range(h):
                    b0, b1, b2, b3 = np.uint32(r0[d]), np.uint32(r1[d]), np.uint32(r2[d]), np.uint32(r3[d])
                    acc_lo[d] += (x0 * nibble_f32(b0 & LOW_NIBBLE) + x1 * nibble_f32(b1 & LOW_NIBBLE)
                                  + x2 * nibble_f32(b2 & LOW_NIBBLE) + x3 * nibble_f32(b3 & LOW_NIBBLE))
                    acc_hi[d] += (x0 * nibble_f32(b0 >> _SHIFT) + x1 * nibble_f32(b1 >> _SHIFT)
                                  + x2 * nibble_f32(b2 >> _SHIFT) + x3 * nibble_f32(b3 >> _SHIFT))
            xs = xsum[m, g]
            ol, oh = out[m, :h], out[m, h:]
            for d in range(h):
                ol[d] += s_lo[d] * acc_lo[d] + o_lo[d] * xs
                oh[d] += s_hi[d] * acc_hi[d] + o_hi[d] * xs


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def int4_cols_team(pargs):
    """`int4_cols_matmul` run by every thread of an OpenMP team: ``pargs`` = [counter,
    parts, m, k, h, groups, offset groups (0 or groups), x, xsum, codes, scale, offset,
    partial] (sizes and addresses); part p sums the groups [groups * p // parts, groups *
    (p + 1) // parts) into ``partial[p]`` ((parts, m, 2 h) fp32; the caller adds the parts
    up), so each thread streams one contiguous run of the codes."""
    a = carray(pargs, 13)
    parts, m, k, h, groups, off_groups = a[1], a[2], a[3], a[4], a[5], a[6]
    x = carray(as_ptr(a[7]), (m, k), np.float32)
    xsum = carray(as_ptr(a[8]), (m, groups), np.float32)
    codes = carray(as_ptr(a[9]), (k, h), np.uint8)
    scale = carray(as_ptr(a[10]), (groups, 2 * h), np.uint16)
    offset = carray(as_ptr(a[11]), (off_groups, 2 * h), np.uint16)
    partial = carray(as_ptr(a[12]), (parts, m, 2 * h), np.float32)
    p = claim(pargs)
    while p < parts:
        int4_cols_matmul(x, xsum, codes, scale, offset, partial[p], groups * p // parts, groups * (p + 1) // parts)
        p = claim(pargs)
