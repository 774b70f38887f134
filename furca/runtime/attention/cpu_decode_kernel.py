"""The numba kernel of `cpu_decode` (imported only when numba is installed).

Every function is at module level: numba's on-disk cache (``cache=True``) keys a kernel
by its source and by the values of the globals and closure variables it references, so
helpers defined inside a builder function are new objects in every process and the cache
never hits (each process recompiled for 10+ s). Here they are the same objects wherever
the module is imported, and a process after the first loads the compiled kernel.
See `cpu_decode` for what the kernel computes and how it is fast.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from furca.runtime.cpu_math_kernel import exp_nonpositive
from furca.runtime.numba_cache import link_sources
from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, claim

link_sources(__file__, "furca.runtime.cpu_math_kernel", "furca.runtime.omp_team_kernel")  # compiled into ours

# The kernel prefetches the K (then V) rows of the keys this far ahead: slots are
# scattered (decode tokens interleave), so the hardware prefetcher misses them.
_PREFETCH_AHEAD = 8


def as_f32(row, scratch):
    """A pool row as fp32: itself, or (bf16 bits) widened into ``scratch``."""

@overload(as_f32, inline="always")
def _as_f32(row, scratch):
    if row.dtype == types.float32:
        return lambda row, scratch: row
    if row.dtype == types.uint16:
        def widen(row, scratch):
            bits = scratch.view(np.uint32)
            for d in range(row.shape[0]):
                bits[d] = np.uint32(row[d]) << 16
            return scratch
        return widen
    return None

@intrinsic
def prefetch(typingctx, arr, i, j, k):
    """Hint the CPU to fetch the cache line holding ``arr[i, j, k]`` (3-D array)."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides),
                                        layout=aryty.layout, inds=list(args[1:]))
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep in all levels, data
        return context.get_dummy_value()
    return types.void(arr, i, j, k), codegen

@njit(inline="always", nogil=True)
def prefetch_rows(buf, h, kv_indices, at):
    """Prefetch the rows of KV head ``h`` at slots ``kv_indices[at : at + 4]``."""
    for t in range(4):
        slot = kv_indices[at + t]
        for d in range(0, buf.shape[2], 16):  # one cache line holds 16 floats
            prefetch(buf, h, slot, d)

@njit(inline="always", nogil=True)
def four_rows(buf, h, kv_indices, at, end, wide):
    """The fp32 rows of KV head ``h`` at slots ``kv_indices[at : at + 4]`` (bf16 rows
    widened into ``wide``), after prefetching the four ``_PREFETCH_AHEAD`` keys on
    when they are before ``end``."""
    if at + _PREFETCH_AHEAD + 4 <= end:
        prefetch_rows(buf, h, kv_indices, at + _PREFETCH_AHEAD)
    return (as_f32(buf[h, kv_indices[at]], wide[0]), as_f32(buf[h, kv_indices[at + 1]], wide[1]),
            as_f32(buf[h, kv_indices[at + 2]], wide[2]), as_f32(buf[h, kv_indices[at + 3]], wide[3]))

@njit(fastmath=True, nogil=True, cache=True)
def decode_tasks(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out, lo, hi):
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_buf.shape[0]
    group = num_heads // num_kv_heads
    max_len = 1
    for task in range(lo, hi):
        max_len = max(max_len, kv_len[task // num_kv_heads])
    qs = np.empty((group, head_dim), np.float32)
    wide = np.empty((4, head_dim), np.float32)  # bf16 pools: the rows in use, widened
    acc_o = np.empty((group, head_dim), np.float32)
    scores = np.empty((group, max_len), np.float32)
    ebits = np.empty(max_len, np.int32)
    for task in range(lo, hi):
        r = task // num_kv_heads
        h = task - r * num_kv_heads
        row, start, length = rows[r], kv_start[r], kv_len[r]
        for g in range(group):
            for d in range(head_dim):
                qs[g, d] = q[row, h * group + g, d] * scale
        # scores (scale folded into qs), 4 keys per step, K rows prefetched ahead
        j = 0
        while j + 4 <= length:
            k0, k1, k2, k3 = four_rows(k_buf, h, kv_indices, start + j, start + length, wide)
            g = 0
            while g + 2 <= group and group % 2 == 0:
                qg = qs[g]
                qf = qs[g + 1]
                a0 = np.float32(0.0); a1 = np.float32(0.0); a2 = np.float32(0.0); a3 = np.float32(0.0)
                b0 = np.float32(0.0); b1 = np.float32(0.0); b2 = np.float32(0.0); b3 = np.float32(0.0)
                for d in range(head_dim):
                    x = qg[d]
                    y = qf[d]
                    c0 = k0[d]; c1 = k1[d]; c2 = k2[d]; c3 = k3[d]
                    a0 += x * c0; a1 += x * c1; a2 += x * c2; a3 += x * c3
                    b0 += y * c0; b1 += y * c1; b2 += y * c2; b3 += y * c3
                sg = scores[g]
                sg[j] = a0; sg[j + 1] = a1; sg[j + 2] = a2; sg[j + 3] = a3
                sg = scores[g + 1]
                sg[j] = b0; sg[j + 1] = b1; sg[j + 2] = b2; sg[j + 3] = b3
                g += 2
            while g < group:
                qg = qs[g]
                a0 = np.float32(0.0); a1 = np.float32(0.0); a2 = np.float32(0.0); a3 = np.float32(0.0)
                for d in range(head_dim):
                    x = qg[d]
                    a0 += x * k0[d]; a1 += x * k1[d]; a2 += x * k2[d]; a3 += x * k3[d]
                sg = scores[g]
                sg[j] = a0; sg[j + 1] = a1; sg[j + 2] = a2; sg[j + 3] = a3
                g += 1
            j += 4
        while j < length:
            k0 = as_f32(k_buf[h, kv_indices[start + j]], wide[0])
            for g in range(group):
                qg = qs[g]
                a0 = np.float32(0.0)
                for d in range(head_dim):
                    a0 += qg[d] * k0[d]
                scores[g, j] = a0
            j += 1
        # softmax per head, exp(x - max) vectorized (`exp_nonpositive`)
        for g in range(group):
            sg = scores[g]
            m = sg[0]
            for j in range(1, length):
                m = max(m, sg[j])
            for j in range(length):
                sg[j] -= m
            exp_nonpositive(sg[:length], sg[:length], ebits[:length])
            total = np.float32(0.0)
            for j in range(length):
                total += sg[j]
            inv = np.float32(1.0) / total
            for j in range(length):
                sg[j] *= inv
        # p . v, 4 keys per step into a contiguous accumulator, V rows prefetched ahead
        acc_o[:] = 0
        j = 0
        while j + 4 <= length:
            v0, v1, v2, v3 = four_rows(v_buf, h, kv_indices, start + j, start + length, wide)
            g = 0
            while g + 2 <= group and group % 2 == 0:
                sg = scores[g]
                p0 = sg[j]; p1 = sg[j + 1]; p2 = sg[j + 2]; p3 = sg[j + 3]
                sg = scores[g + 1]
                r0 = sg[j]; r1 = sg[j + 1]; r2 = sg[j + 2]; r3 = sg[j + 3]
                ag = acc_o[g]
                af = acc_o[g + 1]
                for d in range(head_dim):
                    c0 = v0[d]; c1 = v1[d]; c2 = v2[d]; c3 = v3[d]
                    ag[d] += p0 * c0 + p1 * c1 + p2 * c2 + p3 * c3
                    af[d] += r0 * c0 + r1 * c1 + r2 * c2 + r3 * c3
                g += 2
            while g < group:
                sg = scores[g]
                p0 = sg[j]; p1 = sg[j + 1]; p2 = sg[j + 2]; p3 = sg[j + 3]
                ag = acc_o[g]
                for d in range(head_dim):
                    ag[d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d]
                g += 1
            j += 4
        while j < length:
            v0 = as_f32(v_buf[h, kv_indices[start + j]], wide[0])
            for g in range(group):
                p0 = scores[g, j]
                ag = acc_o[g]
                for d in range(head_dim):
                    ag[d] += p0 * v0[d]
            j += 1
        for g in range(group):
            for d in range(head_dim):
                out[row, h * group + g, d] = acc_o[g, d]



@njit(inline="always", nogil=True)
def _decode_parts(pargs, a, k_buf, v_buf):
    """The runs of `decode_tasks` this thread claims. ``a`` (``pargs``' array) = [counter,
    parts, T, H, D, KV, slots, requests, kv index count, then the addresses of q, k_buf,
    v_buf, rows, kv_start, kv_len, kv_indices, out, scale (one fp32), bounds (parts + 1
    task indices: run p is tasks bounds[p] .. bounds[p + 1])]."""
    parts, t, heads, dim, reqs, nidx = a[1], a[2], a[3], a[4], a[7], a[8]
    q = carray(as_ptr(a[9]), (t, heads, dim), np.float32)
    rows = carray(as_ptr(a[12]), reqs, np.int64)
    kv_start = carray(as_ptr(a[13]), reqs, np.int64)
    kv_len = carray(as_ptr(a[14]), reqs, np.int64)
    kv_indices = carray(as_ptr(a[15]), nidx, np.int64)
    out = carray(as_ptr(a[16]), (t, heads, dim), np.float32)
    scale = carray(as_ptr(a[17]), 1, np.float32)[0]
    bounds = carray(as_ptr(a[18]), parts + 1, np.int64)
    p = claim(pargs)
    while p < parts:
        decode_tasks(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out, bounds[p], bounds[p + 1])
        p = claim(pargs)


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True)
def decode_team_f32(pargs):
    """`decode_tasks` over an fp32 pool, run by every thread of an OpenMP team."""
    a = carray(pargs, 19)
    shape = (a[5], a[6], a[4])
    _decode_parts(pargs, a, carray(as_ptr(a[10]), shape, np.float32), carray(as_ptr(a[11]), shape, np.float32))


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True)
def decode_team_bf16(pargs):
    """`decode_tasks` over a bf16 pool (uint16 bits), run by every thread of an OpenMP team."""
    a = carray(pargs, 19)
    shape = (a[5], a[6], a[4])
    _decode_parts(pargs, a, carray(as_ptr(a[10]), shape, np.uint16), carray(as_ptr(a[11]), shape, np.uint16))
