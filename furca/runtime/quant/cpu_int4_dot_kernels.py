"""numba kernels of ``Int4Dot``: int4 weights dotted with x quantized to int8 per group of
32, in integer AVX-512 VNNI dot products (imported only where the CPU has AVX512_VNNI:
``int4_dot.vnni_available``; the ``cfunc`` compiles at import).

The weight is stored in blocks of 16 rows, each block contiguous: ``words`` (N / 16, K / 8,
16) uint32, word [b, r, t] holding q[16 b + t, 8 r + i] in the low nibble of byte i and
q[16 b + t, 8 r + 4 + i] in its high nibble (i = 0..3), so that masking a word (&
0x0F0F0F0F) or shifting it (>> 4, & 0x0F0F0F0F) gives four unsigned bytes to dot with
four int8 of x: one vpdpbusd (u8 x s8, four products summed into each int32 lane) per
16 rows and 4 k. ``scale`` / ``offset`` (N / 16, K / 32, 16) fp16 bits. x of a group of
32 is rounded to int8 (symmetric, d = max |x| / 127, llama.cpp's Q8_1 block), its 32
bytes read as 8 int32 words; a group's integer dot is exact in int32 (at most 32 * 15 *
127) and enters the fp32 result once: acc * (scale * d) + offset * xsum, with xsum the
exact fp32 sum of x over the group.

``_tile16`` computes one block for one x row as LLVM IR end to end: the int32 and fp32
accumulators stay in zmm registers across all groups of K (eight vpdpbusd, two
vcvtph2ps and two FMAs a group), one store at the end; numba has no way to ask for
vpdpbusd (LLVM does not turn a scalar u8 x s8 dot into it) nor to keep a 16-lane
accumulator in a register across a loop of its own.
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
def _tile16(typingctx, words, scale, offset, xq, xd, xsum, out, b, m, ob):
    """out[m, 16 ob:16 ob + 16] = x[m] @ (the rows of block b).T: words (N / 16, K / 8, 16)
    uint32, scale / offset (N / 16, G, 16) fp16 bits, xq (M, K / 4) int32 (x's int8
    codes), xd / xsum (M, G) fp32, out (M, *) fp32; arrays C-contiguous in their last
    dimension."""
    sig = types.void(words, scale, offset, xq, xd, xsum, out, b, m, ob)
    def codegen(context, builder, signature, args):
        arrs = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:7], args[:7])]
        w_a, s_a, o_a, xq_a, xd_a, xs_a, out_a = arrs
        b, m, ob = args[7], args[8], args[9]
        i32, i64, f32, f16 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.HalfType()
        v16i, v16f, v16h = ir.VectorType(i32, 16), ir.VectorType(f32, 16), ir.VectorType(f16, 16)
        dp = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16i, [v16i, v16i, v16i]), "llvm.x86.avx512.vpdpbusd.512")
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16f, [v16f, v16f, v16f]), "llvm.fma.v16f32")
        groups = builder.extract_value(s_a.shape, 1)
        wb = builder.extract_value(w_a.strides, 0); wr = builder.extract_value(w_a.strides, 1)
        sb = builder.extract_value(s_a.strides, 0); sg = builder.extract_value(s_a.strides, 1)
        xqm = builder.extract_value(xq_a.strides, 0); xdm = builder.extract_value(xd_a.strides, 0)
        outm = builder.extract_value(out_a.strides, 0)
        def addr(arr, off):
            return builder.add(builder.ptrtoint(arr.data, i64), off)
        wbase = addr(w_a, builder.mul(b, wb))
        sbase = addr(s_a, builder.mul(b, sb)); obase = addr(o_a, builder.mul(b, sb))
        xqbase = addr(xq_a, builder.mul(m, xqm)); xdbase = addr(xd_a, builder.mul(m, xdm)); xsbase = addr(xs_a, builder.mul(m, xdm))
        facc = cgutils.alloca_once_value(builder, ir.Constant(v16f, None))
        mask, four = ir.Constant(v16i, [0x0F0F0F0F] * 16), ir.Constant(v16i, [4] * 16)
        undef_i, undef_f = ir.Constant(v16i, ir.Undefined), ir.Constant(v16f, ir.Undefined)
        def splat(s, undef):
            return builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(i32, 0)), undef, ir.Constant(v16i, [0] * 16))
        with cgutils.for_range(builder, groups) as loop:
            g = loop.index
            ia = ir.Constant(v16i, None)
            for i in range(4):
                row = builder.add(builder.mul(g, ir.Constant(i64, 4)), ir.Constant(i64, i))
                wv = builder.load(builder.inttoptr(builder.add(wbase, builder.mul(row, wr)), v16i.as_pointer()), align=4)
                xi = builder.add(builder.mul(g, ir.Constant(i64, 8)), ir.Constant(i64, 2 * i))
                x0 = builder.load(builder.inttoptr(builder.add(xqbase, builder.mul(xi, ir.Constant(i64, 4))), i32.as_pointer()))
                x1 = builder.load(builder.inttoptr(builder.add(xqbase, builder.mul(builder.add(xi, ir.Constant(i64, 1)), ir.Constant(i64, 4))), i32.as_pointer()))
                ia = builder.call(dp, [ia, builder.and_(wv, mask), splat(x0, undef_i)])
                ia = builder.call(dp, [ia, builder.and_(builder.lshr(wv, four), mask), splat(x1, undef_i)])
            sv = builder.fpext(builder.load(builder.inttoptr(builder.add(sbase, builder.mul(g, sg)), v16h.as_pointer()), align=2), v16f)
            ov = builder.fpext(builder.load(builder.inttoptr(builder.add(obase, builder.mul(g, sg)), v16h.as_pointer()), align=2), v16f)
            goff = builder.mul(g, ir.Constant(i64, 4))
            d = builder.load(builder.inttoptr(builder.add(xdbase, goff), f32.as_pointer()))
            xs = builder.load(builder.inttoptr(builder.add(xsbase, goff), f32.as_pointer()))
            fa = builder.load(facc)
            fa = builder.call(fma, [builder.sitofp(ia, v16f), builder.fmul(sv, splat(d, undef_f)), fa])
            fa = builder.call(fma, [ov, splat(xs, undef_f), fa])
            builder.store(fa, facc)
        optr = builder.inttoptr(builder.add(builder.add(builder.ptrtoint(out_a.data, i64), builder.mul(m, outm)), builder.mul(ob, ir.Constant(i64, 64))), v16f.as_pointer())
        builder.store(builder.load(facc), optr, align=4)
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
    """out[:, 16 lo:16 hi] = x @ w.T for the row blocks [lo, hi): x (M, K) fp32 or bf16
    bits (uint16), rounded to int8 per group of 32 here; out (M, N) fp32 or bf16 bits
    (uint16, rounded to nearest even)."""
    m_rows, k = x.shape
    groups = scale.shape[1]
    xq8 = np.empty((m_rows, k), np.int8)
    xd, xsum = np.empty((m_rows, groups), np.float32), np.empty((m_rows, groups), np.float32)
    quantize_x_groups(x, xq8, xd, xsum)
    xq = xq8.view(np.int32)  # four int8 of x a word
    res = np.empty((m_rows, 16 * (hi - lo)), np.float32)
    for m in range(m_rows):
        for b in range(lo, hi):
            _tile16(words, scale, offset, xq, xd, xsum, res, b, m, b - lo)
    _store_rows(res, out, 16 * lo)


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
    groups, k, n = a[5], a[3], a[4]
    words = carray(as_ptr(a[9]), (n // 16, k // 8, 16), np.uint32)
    scale = carray(as_ptr(a[10]), (n // 16, groups, 16), np.uint16)
    offset = carray(as_ptr(a[11]), (n // 16, groups, 16), np.uint16)
    parts, nb = a[1], n // 16
    p = claim(pargs)
    while p < parts:
        int4_dot_matmul(x, words, scale, offset, out, nb * p // parts, nb * (p + 1) // parts)
        p = claim(pargs)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def int4_dot_team(pargs):
    """`int4_dot_matmul` run by every thread of an OpenMP team: ``pargs`` = [counter,
    parts, m, k, n, groups, 0, x, x is bf16, words, scale, offset, out] (sizes, addresses
    and a 0 / 1 flag; out has x's dtype); part p is the row blocks [nb * p // parts, nb *
    (p + 1) // parts) with nb = n / 16: one contiguous run of the weight. Each thread rounds x to int8 itself (a
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
    sf, of = np.empty(n, np.float32), np.empty(n, np.float32)
    wide = np.empty(n, np.float32)
    bits = wide.view(np.uint32)
    wr, s16, o16 = np.empty(n, np.uint32), np.empty(n, np.uint16), np.empty(n, np.uint16)
    for r in range(lo, hi):
        g = r // 4  # 8 k a word row, 32 a group
        for b in range(words.shape[0]):  # row r of every block (and its group's scales) gathered
            base = 16 * b
            for t in range(16):
                wr[base + t] = words[b, r, t]
                s16[base + t] = scale[b, g, t]
                o16[base + t] = offset[b, g, t]
        half_to_f32(s16, sf)
        half_to_f32(o16, of)
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
