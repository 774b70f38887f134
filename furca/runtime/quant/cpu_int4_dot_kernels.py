"""numba kernels of ``Int4Dot``: int4 weights dotted with x quantized to int8 per group of
32, in integer AVX-512 VNNI dot products (imported only where the CPU has AVX512_VNNI:
``int4_dot.vnni_available``; the ``cfunc`` compiles at import).

words (K / 8, N) uint32: word [r, n] holds q[n, 8 r + i] in the low nibble of byte i and
q[n, 8 r + 4 + i] in its high nibble (i = 0..3), so that masking the word (& 0x0F0F0F0F)
or shifting it (>> 4, & 0x0F0F0F0F) gives four unsigned bytes to dot with four int8 of
x: one vpdpbusd (u8 x s8, four products summed into each int32 lane) per 16 rows and 4 k.
x of a group of 32 is quantized to int8 (symmetric, d = max |x| / 127, llama.cpp's Q8_1
block), its 32 bytes read as 8 int32 words; a group's integer dot is exact in int32 (at
most 32 * 15 * 127) and enters the output once: acc * (scale * d) + offset * xsum, with
xsum the exact fp32 sum of x over the group. The loops over N are zero-based and
contiguous (cpu_kernels.py's docstring); the dot itself is LLVM's vpdpbusd intrinsic on
512-bit vectors, emitted by ``_dpbusd_group`` (numba has no way to ask for it: LLVM does
not turn a scalar u8 x s8 dot into vpdpbusd).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, claim
from furca.runtime.quant.cpu_int4_kernels import LOW_NIBBLE, f32_bits, half_to_f32, nibble_f32
from furca.runtime.quant.cpu_kernels import store_row

_OPTS = dict(fastmath=True, nogil=True, cache=True, boundscheck=False, error_model="numpy")


@intrinsic
def _dpbusd_group(typingctx, acc, words, r, d, e, x0, x1, x2, x3, x4, x5, x6, x7):
    """acc[e:e + 16] (int32) += the dot of the word rows r..r + 3 (columns d..d + 15 of
    ``words``) with the x words x0..x7 (x0 / x1: row r's low / high nibbles, and so on):
    eight vpdpbusd on 512-bit vectors."""
    sig = types.void(acc, words, r, d, e, x0, x1, x2, x3, x4, x5, x6, x7)

    def codegen(context, builder, signature, args):
        acc_a = context.make_array(signature.args[0])(context, builder, args[0])
        w_a = context.make_array(signature.args[1])(context, builder, args[1])
        i32, i64 = ir.IntType(32), ir.IntType(64)
        v16 = ir.VectorType(i32, 16)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16, v16, v16]),
                                            "llvm.x86.avx512.vpdpbusd.512")
        row_bytes = builder.extract_value(w_a.strides, 0)
        aptr = builder.bitcast(builder.gep(acc_a.data, [args[4]]), v16.as_pointer())
        a = builder.load(aptr, align=4)
        mask, four = ir.Constant(v16, [0x0F0F0F0F] * 16), ir.Constant(v16, [4] * 16)
        base = builder.add(builder.ptrtoint(w_a.data, i64), builder.mul(args[3], ir.Constant(i64, 4)))
        undef = ir.Constant(v16, ir.Undefined)

        def splat(s):
            one = builder.insert_element(undef, s, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, undef, ir.Constant(v16, [0] * 16))

        for i in range(4):
            row = builder.add(args[2], ir.Constant(i64, i))
            wv = builder.load(builder.inttoptr(builder.add(base, builder.mul(row, row_bytes)), v16.as_pointer()),
                              align=4)
            a = builder.call(fn, [a, builder.and_(wv, mask), splat(args[5 + 2 * i])])
            a = builder.call(fn, [a, builder.and_(builder.lshr(wv, four), mask), splat(args[6 + 2 * i])])
        builder.store(a, aptr, align=4)
        return context.get_dummy_value()

    return sig, codegen


def _as_f32(v):
    """v (an fp32, or bf16 bits as uint16) as fp32."""


@overload(_as_f32, inline="always")
def _as_f32_impl(v):
    if v == types.uint16:
        return lambda v: f32_bits(np.uint32(v) << np.uint32(16))
    return lambda v: np.float32(v)


@njit(inline="always", nogil=True)
def quantize_x_groups(x, xq, xd, xsum):
    """x (M, K) fp32 or bf16 bits (uint16) -> xq (M, K) int8 = round(x / d) per group of
    32, xd (M, K / 32) = d = max |x| / 127 (0 for an all-zero group), xsum (M, K / 32) =
    the exact sum of x."""
    m_rows, k = x.shape
    for m in range(m_rows):
        xr, qr = x[m], xq[m]
        for g in range(k // 32):
            k0 = g * 32
            amax, s = np.float32(0.0), np.float32(0.0)
            for j in range(32):
                v = _as_f32(xr[k0 + j])
                amax = max(amax, abs(v))
                s += v
            inv = np.float32(127.0) / amax if amax > 0 else np.float32(0.0)
            for j in range(32):
                qr[k0 + j] = np.int8(np.round(_as_f32(xr[k0 + j]) * inv))
            xd[m, g] = amax / np.float32(127.0)
            xsum[m, g] = s


@njit(**_OPTS)
def int4_dot_matmul(x, words, scale, offset, out, lo, hi):
    """out[:, lo:hi] = x @ w.T for the rows [lo, hi) of w (multiples of 16): x (M, K) fp32
    or bf16 bits (uint16), rounded to int8 per group of 32 here; words (K / 8, N) uint32,
    scale / offset (G, N) fp16 bits (offset (0, N): none), groups of 32; out (M, N) fp32
    or bf16 bits (uint16, rounded to nearest even)."""
    m_rows, k = x.shape
    groups = scale.shape[0]
    xq8 = np.empty((m_rows, k), np.int8)
    xd, xsum = np.empty((m_rows, groups), np.float32), np.empty((m_rows, groups), np.float32)
    quantize_x_groups(x, xq8, xd, xsum)
    xq = xq8.view(np.int32)  # four int8 of x a word
    w = hi - lo
    acc = np.empty(w, np.int32)
    sf, of = np.empty(w, np.float32), np.zeros(w, np.float32)
    res = np.zeros((m_rows, w), np.float32)
    for g in range(groups):
        half_to_f32(scale[g, lo:hi], sf)
        if offset.shape[0] > 0:
            half_to_f32(offset[g, lo:hi], of)
        q = 8 * g
        for m in range(m_rows):
            for j in range(w):
                acc[j] = 0
            xr = xq[m]
            for c in range(w // 16):
                _dpbusd_group(acc, words, 4 * g, lo + 16 * c, 16 * c, xr[q], xr[q + 1], xr[q + 2], xr[q + 3],
                              xr[q + 4], xr[q + 5], xr[q + 6], xr[q + 7])
            dd, xs, rrow = xd[m, g], xsum[m, g], res[m]
            for j in range(w):
                rrow[j] += np.float32(acc[j]) * (sf[j] * dd) + of[j] * xs
    _store_rows(res, out, lo)


@njit(nogil=True, cache=True, boundscheck=False)
def _store_rows(res, out, lo):
    """out[:, lo:lo + w] = res (M, w) fp32, as fp32 or bf16 bits. A function of its own:
    the uint32 view of the rounding kept out of the dot kernel (a second-dtype view of a
    scratch array makes LLVM assume aliasing there)."""
    bits = res.view(np.uint32)
    for m in range(res.shape[0]):
        store_row(res[m], bits[m], out[m, lo:lo + res.shape[1]])


@njit(inline="always", nogil=True)
def _team_parts(pargs, a, x, out):
    groups, off_groups, k, n = a[5], a[6], a[3], a[4]
    words = carray(as_ptr(a[9]), (k // 8, n), np.uint32)
    scale = carray(as_ptr(a[10]), (groups, n), np.uint16)
    offset = carray(as_ptr(a[11]), (off_groups, n), np.uint16)
    parts, n16 = a[1], n // 16
    p = claim(pargs)
    while p < parts:
        int4_dot_matmul(x, words, scale, offset, out, 16 * (n16 * p // parts), 16 * (n16 * (p + 1) // parts))
        p = claim(pargs)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def int4_dot_team(pargs):
    """`int4_dot_matmul` run by every thread of an OpenMP team: ``pargs`` = [counter,
    parts, m, k, n, groups, offset groups, x, x is bf16, words, scale, offset, out] (sizes,
    addresses and a 0 / 1 flag; out has x's dtype); part p is the weight rows [16 * (n16
    * p // parts), 16 * (n16 * (p + 1) // parts)) with n16 = n / 16 (runs of at least 64
    bytes of every word row). Each thread rounds x to int8 itself (a
    few thousand values), so no part waits for another."""
    a = carray(pargs, 13)
    m, k, n = a[2], a[3], a[4]
    if a[8]:
        _team_parts(pargs, a, carray(as_ptr(a[7]), (m, k), np.uint16), carray(as_ptr(a[12]), (m, n), np.uint16))
    else:
        _team_parts(pargs, a, carray(as_ptr(a[7]), (m, k), np.float32), carray(as_ptr(a[12]), (m, n), np.float32))


@njit(**_OPTS)
def dequant_words_t(words, scale, offset, out_t, lo, hi):
    """The word rows [lo, hi) dequantized into the transposed weight: out_t[k, n] =
    scale[g, n] * q[n, k] + offset[g, n] for k in [8 lo, 8 hi), out_t (K, N) fp32 or
    uint16 (bf16 bits, rounded to nearest even)."""
    n = out_t.shape[1]
    sf, of = np.empty(n, np.float32), np.zeros(n, np.float32)
    wide = np.empty(n, np.float32)
    bits = wide.view(np.uint32)
    for r in range(lo, hi):
        g = r // 4  # 8 k a word row, 32 a group
        half_to_f32(scale[g], sf)
        if offset.shape[0] > 0:
            half_to_f32(offset[g], of)
        wr = words[r]
        for i in range(8):
            shift = np.uint32(8 * (i % 4) + 4 * (i // 4))
            o = out_t[8 * r + i]
            if o.itemsize == 4:  # fp32: straight into the output
                for j in range(n):
                    o[j] = sf[j] * nibble_f32((wr[j] >> shift) & LOW_NIBBLE) + of[j]
            else:
                for j in range(n):
                    wide[j] = sf[j] * nibble_f32((wr[j] >> shift) & LOW_NIBBLE) + of[j]
                store_row(wide, bits, o)
