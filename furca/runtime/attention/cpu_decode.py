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

Threads: the kernel runs on numba's ``workqueue`` threading layer, as many threads as
torch uses (``torch.get_num_threads()`` at each call). Not the ``omp`` layer numba
picks by default: it shares torch's OpenMP runtime, and alternating the two teams
cost ~2-8 ms per call here (a 300-token decode took 2.2 ms instead of 0.1 ms). So
``get_decode`` selects ``workqueue`` when numba has launched no parallel code yet, and
returns None (the gather path) when another layer is already running. workqueue may
not be entered by two threads at once, so calls are serialised by a process-wide lock
(two engines in one process take turns for this kernel only).

decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out) -> None
    q, out: float32 (T, H, D); k_buf, v_buf: float32 (KV, num_slots, D); rows,
    kv_start, kv_len: int64 (n,); kv_indices: int64. Writes ``out[rows]`` only. Two
    passes per task (scores, then the weighted sum of V), fp32 throughout; releases
    the GIL and runs the tasks on numba's threads (the same OpenMP runtime as torch).
"""

from __future__ import annotations

import os
import threading

_LOCK = threading.Lock()
_DECODE: list = []  # [decode or None] once resolved


def get_decode():
    if _DECODE:
        return _DECODE[0]
    with _LOCK:
        if not _DECODE:
            _DECODE.append(_build())
    return _DECODE[0]


def _build():
    if os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0"):
        return None
    try:
        import numba
        import numpy as np
        from numba import njit, prange
    except ImportError:  # numba is optional
        return None

    import torch
    from numba.np.ufunc import parallel as numba_parallel

    if numba_parallel._is_initialized:  # some other code chose the layer already
        if numba.threading_layer() != "workqueue":
            return None
    else:
        numba.config.THREADING_LAYER = "workqueue"
    max_threads = numba.config.NUMBA_NUM_THREADS
    launch_lock = threading.Lock()

    def decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out):
        with launch_lock:
            numba.set_num_threads(max(1, min(torch.get_num_threads(), max_threads)))
            _decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out)

    @njit(parallel=True, fastmath=True, nogil=True, cache=True)
    def _decode(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out):
        num_heads, head_dim = q.shape[1], q.shape[2]
        num_kv_heads = k_buf.shape[0]
        group = num_heads // num_kv_heads
        n = rows.shape[0]
        for task in prange(n * num_kv_heads):
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

    return decode
