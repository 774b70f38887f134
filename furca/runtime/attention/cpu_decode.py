"""Decode attention on CPU, compiled with numba when it is installed.

The torch path gathers each decode request's K/V rows out of the token pool
(``index_select``), pads them into one tensor and calls SDPA: every step copies the
whole context once and reads it twice. This kernel reads K/V straight from the pool
through ``kv_indices`` instead, one (request, KV head) per task, so a step reads the
context once and copies nothing. Semantics, in torch::

    for r in range(n):                                  # decode requests
        slots = kv_indices[kv_start[r] : kv_start[r] + kv_len[r]]
        for h in range(H):
            k = k_buf[h // G, slots]; v = v_buf[h // G, slots]     # (L, D)
            p = softmax(q[rows[r], h] @ k.T * scale)               # fp32
            out[rows[r], h] = p @ v

get_decode() -> decode or None (numba missing, or FURCA_NO_NUMBA=1: the caller keeps
the gather + SDPA path). numba is imported on the first call, not at import.

decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out) -> None
    q, out: float32 (T, H, D); k_buf, v_buf: (KV, num_slots, D), float32, or bf16 pools
    passed as their uint16 bits (each row is widened to fp32 as it is read: a bf16 is
    the top half of an fp32); rows, kv_start, kv_len: int64 (n,); kv_indices: int64.
    Writes ``out[rows]`` only. Two passes per task (scores, then the weighted sum of V),
    fp32 arithmetic throughout.

How the kernel is fast: ``scale`` is folded into a contiguous copy of the G query rows;
both passes take 4 keys per step (4 dot products per head share each q load and end
in one batch of horizontal adds; 4 V rows per load/store of the accumulator), two heads
at a time when G is even; the softmax's exp is a Cephes-style polynomial that LLVM
vectorizes (numba calls scalar ``expf`` otherwise); and the K/V rows of the keys
``_PREFETCH_AHEAD`` steps ahead are prefetched: the slots of the decoded tokens are
scattered, and without it the kernel waited on memory more than it computed.

Threads: the compiled kernel is serial and releases the GIL; ``decode`` cuts the tasks
into contiguous runs of about equal context and runs them on up to
``torch.get_num_threads()`` threads (the caller's and a small shared pool), one run
alone when the work is too small to split. Not numba's ``parallel=True``: its default
``omp`` layer shares torch's OpenMP runtime and alternating the two teams cost
milliseconds per call here, its ``workqueue`` layer is process-global and must not be
entered by two threads at once, and a parallel kernel took 12 s to compile instead of
3. Each task is computed by one thread in a fixed order, so the result does not depend
on how the tasks were split.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_LOCK = threading.Lock()
_DECODE: list = []  # [decode or None] once resolved
_POOL: list[ThreadPoolExecutor] = []
# a forked child has none of the parent's threads: it starts a pool of its own
os.register_at_fork(after_in_child=_POOL.clear)

# Below this many (context token x KV head) pairs per thread, a split costs more than
# it saves (a thread hand-off is ~20-40 us; a task reads ~0.1 us per pair).
_MIN_WORK_PER_THREAD = 4096
# The kernel prefetches the K (then V) rows of the keys this far ahead: slots are
# scattered (decode tokens interleave), so the hardware prefetcher misses them.
_PREFETCH_AHEAD = 8


def get_decode():
    if _DECODE:
        return _DECODE[0]
    with _LOCK:
        if not _DECODE:
            _DECODE.append(_build())
    return _DECODE[0]


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        with _LOCK:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1),
                                                thread_name_prefix="furca-attn"))
    return _POOL[0]


def split_tasks(kv_len: np.ndarray, num_kv_heads: int, num_threads: int) -> list[tuple[int, int]]:
    """Cut tasks ``0 .. len(kv_len) * num_kv_heads`` (request-major) into at most
    ``num_threads`` contiguous runs of about equal context, none below
    ``_MIN_WORK_PER_THREAD``."""
    num_tasks = int(kv_len.shape[0]) * num_kv_heads
    total = int(kv_len.sum()) * num_kv_heads
    parts = max(1, min(num_threads, num_tasks, total // _MIN_WORK_PER_THREAD))
    if parts == 1:
        return [(0, num_tasks)]
    cost = np.repeat(kv_len, num_kv_heads).cumsum()
    cuts = (np.searchsorted(cost, total * np.arange(1, parts) / parts) + 1).tolist()  # run ends after the task reaching its share
    bounds = [0, *sorted(set(min(max(c, 1), num_tasks - 1) for c in cuts)), num_tasks]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        from numba import njit
    except ImportError:  # numba is optional
        return None
    import torch

    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

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
            # softmax per head. exp(x), x <= 0: x = n ln2 + f (|f| <= ln2/2, ln2 in two
            # parts), a polynomial for exp(f), then n added to the exponent bits (x clamped
            # at -87 keeps 2^n normal); unlike numba's scalar expf call, this vectorizes
            for g in range(group):
                sg = scores[g]
                m = sg[0]
                for j in range(1, length):
                    m = max(m, sg[j])
                for j in range(length):
                    x = max(sg[j] - m, np.float32(-87.0))
                    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
                    x = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
                    z = x * x
                    y = ((((np.float32(1.9875691500e-4) * x + np.float32(1.3981999507e-3)) * x
                           + np.float32(8.3334519073e-3)) * x + np.float32(4.1665795894e-2)) * x
                         + np.float32(1.6666665459e-1)) * x + np.float32(5.0000001201e-1)
                    sg[j] = y * z + x + np.float32(1.0)
                    ebits[j] = np.int32(n) << 23
                sbits = sg.view(np.int32)
                for j in range(length):
                    sbits[j] += ebits[j]
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

    def decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out):
        scale = np.float32(scale)
        runs = split_tasks(kv_len, k_buf.shape[0], torch.get_num_threads())
        args = (q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out)
        futures = [_pool().submit(decode_tasks, *args, lo, hi) for lo, hi in runs[1:]]
        try:
            decode_tasks(*args, *runs[0])
        finally:
            for f in futures:
                f.result()

    # compile now (or load the cached build), on the argument types the backend passes;
    # a numba/LLVM that cannot build it (e.g. another prefetch intrinsic name) leaves
    # the caller on the gather path instead of failing its first forward pass
    try:
        i64 = np.zeros(1, np.int64)
        q = np.ones((1, 2, 8), np.float32)
        for kv in (np.ones((1, 2, 8), np.float32), np.ones((1, 2, 8), np.uint16)):  # fp32 and bf16 pools
            decode_tasks(q, kv, kv, i64, i64, np.ones(1, np.int64), i64, np.float32(1.0), np.empty_like(q), 0, 1)
    except Exception as e:  # noqa: BLE001 - any compile or lowering error
        logging.getLogger("furca").warning("CPU decode kernel unavailable (%s: %s); decode attention gathers K/V",
                                           type(e).__name__, e)
        return None
    return decode
