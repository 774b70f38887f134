"""numba kernels of ``Int4Dot``: int4 weights dotted with x rounded per group of 32 (to
int16, or to int8), in integer AVX-512 VNNI dot products (imported only where the CPU has
AVX512_VNNI: ``int4_dot.vnni_available``; the ``cfunc`` compiles at import).

The weight is stored in blocks of 16 rows, each block contiguous: ``words`` (N / 16, K / 8,
16) uint32, word [b, r, t] holding q[16 b + t, 8 r + i] in the low nibble of byte i and
q[16 b + t, 8 r + 4 + i] in its high nibble (i = 0..3). ``scale`` / ``offset`` (N / 16,
K / 32, 16) fp16 bits. Each group's integer dot is exact in int32 and enters the fp32
result once: acc * (scale * d) + offset * xsum.

- int16 x (the default; `quantize_x16`, `int4_dot16_blocks`): d = max |x| / 32767, xsum
  = d * (the sum of the codes). A word shifted by 0, 8, 4, 12 and masked with 0x000F000F
  gives its codes as int16 pairs, each dotted with a pair of x by vpdpwssd (s16 x s16,
  two products summed into each int32 lane): 16 a group, at most 32 * 15 * 32767 in
  int32. Error about 1e-5 of max |y| (x's rounding).
- int8 x (`quantize_x_groups`, `int4_dot_matmul`): d = max |x| / 127 (llama.cpp's Q8_1
  block), xsum the exact sum of x; a word masked with 0x0F0F0F0F, or shifted by 4 and
  masked, gives four unsigned bytes, dotted with four int8 of x by vpdpbusd (u8 x s8): 8
  a group. Twice the integer throughput, about 1e-2 of max |y| (enough to flip the
  default model's greedy near-tie).

A tile (`_make_tile`) computes one block for 1, 2 or 4 x rows as LLVM IR end to end: the
int32 and fp32 accumulators stay in zmm registers across all groups of K (the dots, two
vcvtph2ps and two FMAs a group and row), one store a row at the end; numba has no way to
ask for vpdpbusd / vpdpwssd (LLVM does not turn a scalar dot into them) nor to keep a
16-lane accumulator in a register across a loop of its own.
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


# How a weight word (eight 4-bit codes, see the module docstring) is split for each x
# width: (shift, mask) per part, each part dotted with one int32 of x by the instruction.
# int8 x: four u8 codes a part (q0..q3, then q4..q7), vpdpbusd (u8 x s8, four products into
# each int32 lane). int16 x: two codes a part as int16 pairs ((q0, q2), (q1, q3), (q4, q6),
# (q5, q7)), vpdpwssd (s16 x s16, two products into each lane); x's int16 codes are stored
# in that pair order (`quantize_x16`).
_PARTS = {8: ((0, 0x0F0F0F0F), (4, 0x0F0F0F0F)),
          16: ((0, 0x000F000F), (8, 0x000F000F), (4, 0x000F000F), (12, 0x000F000F))}
_DOT = {8: "llvm.x86.avx512.vpdpbusd.512", 16: "llvm.x86.avx512.vpdpwssd.512"}


def _make_tile(rows: int, x_bits: int):
    """The register tile for ``rows`` consecutive x rows rounded to ``x_bits``, as an
    intrinsic (one per row count: a word's decoded parts serve every row):
    tile(words, scale, offset, xq, xd, xsum, out, b, m, ob) sets out[m + i, 16 ob:16 ob +
    16] = x[m + i] @ (the rows of block b).T for i < rows. words (N / 16, K / 8, 16)
    uint32, scale / offset (N / 16, G, 16) fp16 bits, xq (M, *) x's codes (int8 as int32
    words, or int16; read as int32 words either way), xd / xsum (M, G) fp32, out (M, *)
    fp32; arrays C-contiguous in their last dimension."""
    parts, dot = _PARTS[x_bits], _DOT[x_bits]

    @intrinsic
    def tile(typingctx, words, scale, offset, xq, xd, xsum, out, b, m, ob):
        sig = types.void(words, scale, offset, xq, xd, xsum, out, b, m, ob)

        def codegen(context, builder, signature, args):
            w_a, s_a, o_a, xq_a, xd_a, xs_a, out_a = (context.make_array(t)(context, builder, v)
                                                      for t, v in zip(signature.args[:7], args[:7]))
            b, m, ob = args[7], args[8], args[9]
            i32, i64, f32, f16 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.HalfType()
            v16i, v16f, v16h = ir.VectorType(i32, 16), ir.VectorType(f32, 16), ir.VectorType(f16, 16)
            dp = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16i, [v16i, v16i, v16i]), dot)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16f, [v16f, v16f, v16f]), "llvm.fma.v16f32")

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
                ia = [ir.Constant(v16i, None)] * rows
                for r in range(4):  # the group's four word rows
                    row = builder.add(builder.mul(g, c64(4)), c64(r))
                    wv = load(builder.add(wbase, builder.mul(row, wr)), v16i, 4)
                    vs = [builder.and_(builder.lshr(wv, ir.Constant(v16i, [sh] * 16)) if sh else wv, ir.Constant(v16i, [mk] * 16))
                          for sh, mk in parts]
                    for i in range(rows):
                        for j, v in enumerate(vs):  # x's int32 word len(parts) * row + j
                            xi = builder.add(builder.mul(row, c64(len(parts))), c64(j))
                            xv = load(builder.add(xqb[i], builder.mul(xi, c64(4))), i32, 2)
                            ia[i] = builder.call(dp, [ia[i], v, splat(xv, undef_i)])
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
_tile16 = _make_tile(1, 8)
# int16 x, 1 / 2 / 4 rows at once (`int4_dot16_blocks`).
_tile16_x16_1, _tile16_x16_2, _tile16_x16_4 = (_make_tile(r, 16) for r in (1, 2, 4))


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def quantize_x16(x, xq, xd, xsum):
    """x rounded to int16 per group of 32, for `int4_dot16_blocks`. Callable from njit and
    cfunc code; writes only its three outputs.

    x (M, K) fp32 (or bf16 bits as uint16), K a multiple of 32 -> xq (M, K) int16, xd
    (M, K // 32) fp32, xsum (M, K // 32) fp32, all C-contiguous: for each group of 32,
    d = max |x| / 32767 (0 for an all-zero group), code = round(x / d) (half to even,
    |code| <= 32767), xd = d and xsum = d * (the sum of the group's codes), the sum of
    the rounded x. Within each 8 of K the codes are stored in the order 0, 2, 1, 3, 4, 6,
    5, 7 (the pairs a weight word yields), so xq is an operand of `int4_dot16_blocks`, not
    x in order."""
    m_rows, k = x.shape
    for m in range(m_rows):
        xr, qr = x[m], xq[m]
        for g in range(k // 32):
            k0 = g * 32
            amax = np.float32(0.0)
            for j in range(32):
                amax = max(amax, abs(_as_f32(xr[k0 + j])))
            inv = np.float32(32767.0) / amax if amax > 0 else np.float32(0.0)
            s = 0
            for j in range(32):
                c = np.int16(np.round(_as_f32(xr[k0 + j]) * inv))
                qr[k0 + ((j & ~3) | ((j & 1) << 1) | ((j >> 1) & 1))] = c  # bits 0 and 1 of j swapped
                s += np.int32(c)
            d = amax / np.float32(32767.0)
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
    Per 16-row block and group the integer dot of the int16 codes with the 4-bit ones is
    exact in int32 (at most 32 * 15 * 32767) and enters the fp32 sum as acc * (scale *
    xd) + offset * xsum: x @ w.T of the rounded x (about 1e-5 of max |y| from x's)."""
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
