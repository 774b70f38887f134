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
    q, out: float32 (T, H, D); k_buf, v_buf: float32 (KV, num_slots, D); rows,
    kv_start, kv_len: int64 (n,); kv_indices: int64. Writes ``out[rows]`` only. Two
    passes per task (scores, then the weighted sum of V), fp32 throughout.

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

    @njit(fastmath=True, nogil=True, cache=True)
    def decode_tasks(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out, lo, hi):
        num_heads, head_dim = q.shape[1], q.shape[2]
        num_kv_heads = k_buf.shape[0]
        group = num_heads // num_kv_heads
        for task in range(lo, hi):
            r = task // num_kv_heads
            h = task - r * num_kv_heads
            row, start, length = rows[r], kv_start[r], kv_len[r]
            qh = q[row, h * group:(h + 1) * group]  # (G, D)
            scores = np.empty((group, length), np.float32)
            for j in range(length):
                krow = k_buf[h, kv_indices[start + j]]
                for g in range(group):
                    acc = np.float32(0.0)
                    for d in range(head_dim):
                        acc += qh[g, d] * krow[d]
                    scores[g, j] = acc * scale
            for g in range(group):
                m = scores[g, 0]
                for j in range(1, length):
                    m = max(m, scores[g, j])
                total = np.float32(0.0)
                for j in range(length):
                    e = np.exp(scores[g, j] - m)
                    scores[g, j] = e
                    total += e
                inv = np.float32(1.0) / total
                for j in range(length):
                    scores[g, j] *= inv
            acc_o = np.zeros((group, head_dim), np.float32)
            for j in range(length):
                vrow = v_buf[h, kv_indices[start + j]]
                for g in range(group):
                    p = scores[g, j]
                    for d in range(head_dim):
                        acc_o[g, d] += p * vrow[d]
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

    return decode
