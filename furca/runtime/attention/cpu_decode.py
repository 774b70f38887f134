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
the gather + SDPA path). numba is imported on the first call, not at import;
the kernel lives at module level in `cpu_decode_kernel`, so numba's disk cache hits.

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
``_PREFETCH_AHEAD`` steps ahead (`cpu_decode_kernel`) are prefetched: the slots of the decoded tokens are
scattered, and without it the kernel waited on memory more than it computed.

Threads: the compiled kernel is serial and releases the GIL; ``decode`` cuts the tasks
into contiguous runs of about equal context and runs them on up to
``torch.get_num_threads()`` threads, one run alone when the work is too small to split:
on torch's own OpenMP team (`omp_team`, a cfunc per pool dtype claiming runs) where it is
reachable, else on the caller's thread and a small shared pool. Not numba's
``parallel=True``: its ``omp`` layer links the system's libgomp, a second OpenMP runtime
beside torch's, and alternating the two teams cost milliseconds per call here, its ``workqueue`` layer is process-global and must not be
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
    if num_threads == 1 or num_tasks == 1:
        return [(0, num_tasks)]
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
        from furca.runtime.attention.cpu_decode_kernel import decode_tasks, decode_team_bf16, decode_team_f32
    except ImportError:  # numba missing from this install: the caller gathers instead
        return None
    import torch

    from furca.runtime import omp_team

    def decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out):
        scale = np.float32(scale)
        runs = split_tasks(kv_len, k_buf.shape[0], torch.get_num_threads())
        if len(runs) > 1 and omp_team.available() and all(
                a.flags.c_contiguous for a in (q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, out)):
            scale_arr = np.array([scale], np.float32)
            bounds = np.array([lo for lo, _ in runs] + [runs[-1][1]], np.int64)
            team = decode_team_f32 if k_buf.dtype == np.float32 else decode_team_bf16
            omp_team.run(team, np.array([
                0, len(runs), *q.shape, k_buf.shape[0], k_buf.shape[1], rows.shape[0], kv_indices.shape[0],
                q.ctypes.data, k_buf.ctypes.data, v_buf.ctypes.data, rows.ctypes.data, kv_start.ctypes.data,
                kv_len.ctypes.data, kv_indices.ctypes.data, out.ctypes.data, scale_arr.ctypes.data,
                bounds.ctypes.data], np.int64))
            return
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
