"""numba kernels of ``Int4Dot``: int4 weights dotted with x rounded per group of 32 (to
int16, or to int8), in integer AVX-512 VNNI dot products (imported only where the CPU has
AVX512_VNNI: ``int4_dot.vnni_available``; the ``cfunc`` compiles at import).

The weight is stored in blocks of 16 rows, each block contiguous: ``words`` (N / 16, K / 8,
16) uint32, word [b, r, t] holding q[16 b + t, 8 r + i] in the low nibble of byte i and
q[16 b + t, 8 r + 4 + i] in its high nibble (i = 0..3). ``scale`` / ``offset`` (N / 16,
K / 32, 16) fp16 bits. Each group's integer dot is exact in int32 and enters the fp32
result once: acc * (scale * d) + offset * xsum.

- int16 x (the default; `quantize_x16`, `int4_dot16_blocks`): d = max |x| / 32639, xsum
  = d * (the sum of the codes). Each code is split into two int8 halves (c = 256 hi +
  lo), each half dotted as an int8 x is, the hi sum shifted by 8: 16 vpdpbusd a group
  and the same 3 word operations a word as int8. Error about 2e-5 of max |y| (x's
  rounding). (vpdpwssd on int16 pairs measured 1.3x this one's time with the weight in
  L2: a word yields its codes as int16 pairs with 7 shifts and masks, not 3.)
- int8 x (`quantize_x_groups`, `int4_dot_matmul`): d = max |x| / 127 (llama.cpp's Q8_1
  block), xsum the exact sum of x; a word masked with 0x0F0F0F0F, or shifted by 4 and
  masked, gives four unsigned bytes, dotted with four int8 of x by vpdpbusd (u8 x s8,
  four products summed into each int32 lane): 8 a group. About 1e-2 of max |y|, enough
  to flip the default model's greedy near-tie.

A tile (`_make_tile`) computes one block for 1, 2 or 4 x rows as LLVM IR end to end: the
int32 and fp32 accumulators stay in zmm registers across all groups of K (the dots, two
vcvtph2ps and two FMAs a group and row), one store a row at the end; numba has no way to
ask for vpdpbusd (LLVM does not turn a scalar dot into them) nor to keep a
16-lane accumulator in a register across a loop of its own.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from furca.runtime.numba_cache import link_sources
from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, claim
from furca.runtime.quant.cpu_bits import LOW_NIBBLE, f32_bits, half_to_f32, nibble_f32
from furca.runtime.quant.cpu_kernels import store_row

# the modules whose kernels and intrinsics are compiled into ours
link_sources(__file__, "furca.runtime.omp_team_kernel", "furca.runtime.quant.cpu_bits", "furca.runtime.quant.cpu_kernels")

_OPTS = dict(fastmath=True, nogil=True, cache=True, boundscheck=False, error_model="numpy")


_X16_TOP = 32639  # 127 * 257: the largest int16 code whose hi half ((c + 128) >> 8) fits int8
_LOW4 = 0x0F0F0F0F  # a word masked: q0..q3 as four u8; shifted by 4 and masked: q4..q7


def _make_tile(rows: int, halves: int):
    """The register tile for ``rows`` consecutive x rows, as an intrinsic (one per row
    count: a word's two decoded parts serve every row): tile(words, scale, offset, xq, xd,
    xsum, out, b, m, ob) sets out[m + i, 16 ob:16 ob + 16] = x[m + i] @ (the rows of block
    b).T for i < rows. words (N / 16, K / 8, 16) uint32, scale / offset (N / 16, G, 16) fp16
    bits, xd / xsum (M, G) fp32, out (M, *) fp32; arrays C-contiguous in their last
    dimension. xq (M, *), read as int32 words: x's int8 codes, 8 words a group (``halves``
    1), or its int16 codes c = 256 hi + lo as 8 words of the lo bytes then 8 of the hi
    bytes a group (``halves`` 2: two vpdpbusd chains, the hi one's sum shifted by 8)."""
    @intrinsic
    def tile(typingctx, words, scale, offset, xq, xd, xsum, out, b, m, ob):
        sig = types.void(words, scale, offset, xq, xd, xsum, out, b, m, ob)

        def codegen(context, builder, signature, args):
            w_a, s_a, o_a, xq_a, xd_a, xs_a, out_a = (context.make_array(t)(context, builder, v)
                                                      for t, v in zip(signature.args[:7], args[:7]))
            b, m, ob = args[7], args[8], args[9]
            i32, i64, f32, f16 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.HalfType()
            v16i, v16f, v16h = ir.VectorType(i32, 16), ir.VectorType(f32, 16), ir.VectorType(f16, 16)
            dp = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16i, [v16i, v16i, v16i]), "llvm.x86.avx512.vpdpbusd.512")
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16f, [v16f, v16f, v16f]), "llvm.fma.v16f32")
            pf = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]), "llvm.prefetch.p0")

            def c64(v):
                return ir.Constant(i64, v)

            def addr(arr, off):
                return builder.add(builder.ptrtoint(arr.data, i64), off)

            def row_base(arr, i):  # address of row m + i of a 2-D array
                return addr(arr, builder.mul(builder.add(m, c64(i)), builder.extract_value(arr.strides, 0)))

            def load(a, ty, align):
                return builder.load(builder.inttoptr(a, ty.as_pointer()), align=align)

            undef_i, undef_f = ir.Constant(v16i, ir.Undefined), ir.Constant(v16f, ir.Undefined)

            def splat(s, undef):
                return builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(i32, 0)), undef, ir.Constant(v16i, [0] * 16))

            groups = builder.extract_value(s_a.shape, 1)
            wb, wr = builder.extract_value(w_a.strides, 0), builder.extract_value(w_a.strides, 1)
            sb, sg = builder.extract_value(s_a.strides, 0), builder.extract_value(s_a.strides, 1)
            wbase = addr(w_a, builder.mul(b, wb))
            sbase, obase = addr(s_a, builder.mul(b, sb)), addr(o_a, builder.mul(b, sb))
            xqb, xdb, xsb = ([row_base(a, i) for i in range(rows)] for a in (xq_a, xd_a, xs_a))
            facc = [cgutils.alloca_once_value(builder, ir.Constant(v16f, None)) for _ in range(rows)]
            with cgutils.for_range(builder, groups) as loop:
                g = loop.index
                # one int32 accumulator per row, half and part: independent dependency chains
                # (one chain would wait out vpdpbusd's latency at every step)
                ia = [[ir.Constant(v16i, None)] * (2 * halves) for _ in range(rows)]
                for r in range(4):  # the group's four word rows
                    row = builder.add(builder.mul(g, c64(4)), c64(r))
                    waddr = builder.add(wbase, builder.mul(row, wr))
                    wv = load(waddr, v16i, 4)
                    # the next block's same word row into L1 (its 64 bytes: one line), a block
                    # ahead: cold, the codes' stream is what a matvec waits on (-5..15% time)
                    builder.call(pf, [builder.inttoptr(builder.add(waddr, wb), ir.IntType(8).as_pointer()),
                                      ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
                    low4 = ir.Constant(v16i, [_LOW4] * 16)
                    vs = (builder.and_(wv, low4), builder.and_(builder.lshr(wv, ir.Constant(v16i, [4] * 16)), low4))
                    for i in range(rows):
                        for h in range(halves):
                            for j, v in enumerate(vs):  # x's int32 word 8 (halves - 1) g + 8 h + 2 row + j
                                xi = builder.add(builder.mul(row, c64(2)), c64(8 * h + j))
                                if halves == 2:
                                    xi = builder.add(xi, builder.mul(g, c64(8)))
                                xv = load(builder.add(xqb[i], builder.mul(xi, c64(4))), i32, 2)
                                ia[i][2 * h + j] = builder.call(dp, [ia[i][2 * h + j], v, splat(xv, undef_i)])
                ia = [builder.add(acc[0], acc[1]) if halves == 1 else  # exact: at most 32 * 15 * 32639
                      builder.add(builder.add(acc[0], acc[1]), builder.shl(builder.add(acc[2], acc[3]), ir.Constant(v16i, [8] * 16)))
                      for acc in ia]
                sv = builder.fpext(load(builder.add(sbase, builder.mul(g, sg)), v16h, 2), v16f)
                ov = builder.fpext(load(builder.add(obase, builder.mul(g, sg)), v16h, 2), v16f)
                goff = builder.mul(g, c64(4))
                for i in range(rows):
                    d, xs = load(builder.add(xdb[i], goff), f32, 4), load(builder.add(xsb[i], goff), f32, 4)
                    fa = builder.call(fma, [builder.sitofp(ia[i], v16f), builder.fmul(sv, splat(d, undef_f)), builder.load(facc[i])])
                    builder.store(builder.call(fma, [ov, splat(xs, undef_f), fa]), facc[i])
            for i in range(rows):
                optr = builder.add(row_base(out_a, i), builder.mul(ob, c64(64)))
                builder.store(builder.load(facc[i]), builder.inttoptr(optr, v16f.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return tile


# One x row rounded to int8: out[m, 16 ob:16 ob + 16] = x[m] @ (block b).T, xq (M, K / 4)
# int32 (x's int8 codes four a word).
_tile16 = _make_tile(1, 1)
# int16 x as two int8 halves, 1 / 2 / 4 rows at once (`int4_dot16_blocks`).
_tile16_x16_1, _tile16_x16_2, _tile16_x16_4 = (_make_tile(r, 2) for r in (1, 2, 4))


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def quantize_x16(x, xq, xd, xsum):
    """x rounded to int16 per group of 32, for `int4_dot16_blocks`. Callable from njit and
    cfunc code; writes only its three outputs.

    x (M, K) fp32 (or bf16 bits as uint16), K a multiple of 32 -> xq (M, K) int16, xd
    (M, K // 32) fp32, xsum (M, K // 32) fp32, rows C-contiguous: for each group of 32,
    d = max |x| / 32639 (0 for an all-zero group), code c = round(x / d) (half to even,
    |c| <= 32639 = 127 * 257), xd = d and xsum = d * (the sum of the group's codes), the
    sum of the rounded x. xq holds each group's codes as two int8 halves, c = 256 hi + lo
    with hi = (c + 128) >> 8 and lo in -128..127: the group's 64 bytes are its 32 lo
    then its 32 hi, in x's order; so xq is an operand of `int4_dot16_blocks`, not x's
    codes as int16 values."""
    m_rows, k = x.shape
    for m in range(m_rows):
        xr, qb = x[m], xq[m].view(np.int8)
        for g in range(k // 32):
            k0 = g * 32
            amax = np.float32(0.0)
            for j in range(32):
                amax = max(amax, abs(_as_f32(xr[k0 + j])))
            inv = np.float32(_X16_TOP) / amax if amax > 0 else np.float32(0.0)
            s = 0
            for j in range(32):
                c = np.int32(np.round(_as_f32(xr[k0 + j]) * inv))
                hi = (c + 128) >> 8
                qb[2 * k0 + j] = np.int8(c - 256 * hi)
                qb[2 * k0 + 32 + j] = np.int8(hi)
                s += c
            d = amax / np.float32(_X16_TOP)
            xd[m, g] = d
            xsum[m, g] = d * np.float32(s)


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def int4_dot16_blocks(xq, xd, xsum, words, scale, offset, out, b_lo, b_hi):
    """out[:, 16 b_lo:16 b_hi] = x @ w.T for the row blocks [b_lo, b_hi) of an ``Int4Dot``
    weight, x given as `quantize_x16` wrote it. Callable from njit and cfunc code; writes
    nothing else of out, so threads may share one out with disjoint block ranges.

    xq (M, K) int16, xd / xsum (M, K // 32) fp32 (any M >= 1, taken from xq.shape[0]);
    words (N_padded / 16, K / 8, 16) uint32, scale / offset (N_padded / 16, K / 32, 16)
    uint16 (fp16 bits): ``Int4Dot``'s arrays; out (M, N_padded) fp32, C-contiguous rows.
    Per 16-row block and group the integer dot of the int16 codes with the 4-bit ones
    (two vpdpbusd, one a half: dot(q, hi) * 256 + dot(q, lo)) is exact in int32 (at most
    32 * 15 * 32639) and enters the fp32 sum as acc * (scale * xd) + offset * xsum: x @
    w.T of the rounded x (about 2e-5 of max |y| from x's)."""
    m_rows = xq.shape[0]
    for b in range(b_lo, b_hi):  # one block at a time: its words stay in L1 across the rows of x
        m = 0
        while m + 4 <= m_rows:
            _tile16_x16_4(words, scale, offset, xq, xd, xsum, out, b, m, b)
            m += 4
        if m + 2 <= m_rows:
            _tile16_x16_2(words, scale, offset, xq, xd, xsum, out, b, m, b)
            m += 2
        if m < m_rows:
            _tile16_x16_1(words, scale, offset, xq, xd, xsum, out, b, m, b)


@njit(**_OPTS)
def int4_dot16_matmul(x, words, scale, offset, out, lo, hi):
    """`int4_dot_matmul` with x rounded to int16 (`quantize_x16`) instead of int8."""
    m_rows, k = x.shape
    groups = scale.shape[1]
    xq = np.empty((m_rows, k), np.int16)
    xd, xsum = np.empty((m_rows, groups), np.float32), np.empty((m_rows, groups), np.float32)
    quantize_x16(x, xq, xd, xsum)
    if out.itemsize == 4:  # fp32: straight into out
        int4_dot16_blocks(xq, xd, xsum, words, scale, offset, out, lo, hi)
    else:
        res = np.empty((m_rows, 16 * hi), np.float32)  # columns below 16 lo never touched
        int4_dot16_blocks(xq, xd, xsum, words, scale, offset, res, lo, hi)
        _store_rows(res[:, 16 * lo:], out, 16 * lo)


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
def _team_parts(pargs, a, x, out, matmul):
    groups, k, n = a[5], a[3], a[4]
    words = carray(as_ptr(a[9]), (n // 16, k // 8, 16), np.uint32)
    scale = carray(as_ptr(a[10]), (n // 16, groups, 16), np.uint16)
    offset = carray(as_ptr(a[11]), (n // 16, groups, 16), np.uint16)
    parts, nb = a[1], n // 16
    p = claim(pargs)
    while p < parts:
        matmul(x, words, scale, offset, out, nb * p // parts, nb * (p + 1) // parts)
        p = claim(pargs)


@njit(inline="always", nogil=True)
def _team_dtypes(pargs, matmul):
    a = carray(pargs, 13)
    m, k, n = a[2], a[3], a[4]
    if a[8]:
        _team_parts(pargs, a, carray(as_ptr(a[7]), (m, k), np.uint16), carray(as_ptr(a[12]), (m, n), np.uint16), matmul)
    else:
        _team_parts(pargs, a, carray(as_ptr(a[7]), (m, k), np.float32), carray(as_ptr(a[12]), (m, n), np.float32), matmul)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def int4_dot_team(pargs):
    """`int4_dot_matmul` run by every thread of an OpenMP team: ``pargs`` = [counter,
    parts, m, k, n, groups, 0, x, x is bf16, words, scale, offset, out] (sizes, addresses
    and a 0 / 1 flag; out has x's dtype); part p is the row blocks [nb * p // parts, nb *
    (p + 1) // parts) with nb = n / 16: one contiguous run of the weight. Each thread rounds x to int8 itself (a
    few thousand values), so no part waits for another."""
    _team_dtypes(pargs, int4_dot_matmul)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def int4_dot16_team(pargs):
    """`int4_dot_team` with x rounded to int16 (`int4_dot16_matmul`); the same ``pargs``."""
    _team_dtypes(pargs, int4_dot16_matmul)


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
