"""The numba side of `cpu_step`: every decoder layer of a decode step in one team call.

``step_team`` is a ``cfunc`` run by every thread of torch's OpenMP team (`omp_team.run`).
Each thread walks all layers; per layer the work is five phases, each split between the
threads (parts claimed from a per-phase counter, `fetch_add`) and closed by a spin
barrier (one counter for the whole step: barrier i waits until it reaches i * team size):

    1. residual += delta; xn = rmsnorm(residual)      every thread, into its own copies
       qkv[:, part] = xn @ Wqkv[part].T               parts of the weight rows      | barrier
    2. q, k, v = rope(split(qkv))                      every thread, its own copies
       per claimed (row, KV head) task: k / v into the pool at loc[row], attention  | barrier
    3. delta[:, part] = attn @ Wo[part].T                                            | barrier
    4. residual += delta; xn = rmsnorm(residual)      every thread
       gate_up[:, part] = xn @ Wgu[part].T                                           | barrier
    5. act = silu(gate) * up                           every thread
       delta[:, part] = act @ Wdown[part].T                                          | barrier

The per-row work done by every thread (norms of ``hidden`` values, RoPE of one token, the
SiLU) costs less than a barrier; each thread gets bit-identical copies, since it runs the
same code on the same inputs. After the last layer thread 0 writes its residual out; the
last ``delta`` is in the shared buffer. The per-op path's kernels compute each piece
(`cpu_glue_kernel`, `cpu_decode_kernel.decode_tasks`, the Int4Dot tile and
`cpu_kernels.group_matmul_rows`), so a step equals the per-op path up to the order of
GroupInt8's per-group sums of x.

The weights are described by an int64 table made once at load (`cpu_step`): one record
of ``REC`` fields per layer: the two norms' weight addresses, the layer's K and V pool
buffers, then four projections (qkv, o, gate_up, down) of ``PROJ`` fields each: segment
count, the address and count of its parts (rows of (segment, lo, hi) in units of 16-row
blocks for Int4Dot, rows for GroupInt8), N, K, and up to ``MAX_SEGS`` segments (a fused
projection whose shards kept different layouts) of ``SEG`` fields: kind, rows, groups,
offset groups, the addresses of codes / scale / offset, and the segment's first output
column. Everything is at module level and cache-safe (addresses only in the arguments).
"""

from __future__ import annotations

import numpy as np
from numba import carray, cfunc, njit, types

from furca.runtime.attention.cpu_decode_kernel import decode_tasks
from furca.runtime.models.cpu_glue_kernel import add_rms_norm_rows, rope_qkv_rows, silu_mul_rows
from furca.runtime.models.cpu_step import (
    A_ATTN, A_COS, A_DELTA, A_FLOATS, A_GATE_UP, A_H, A_HEAD_DIM, A_HEADS, A_HIDDEN, A_INTER, A_KV_HEADS,
    A_KV_INDICES, A_KV_LEN, A_KV_START, A_LAYERS, A_LOC, A_M, A_NUM_INDICES, A_NUM_THREADS, A_QKV, A_RESIDUAL,
    A_ROWS, A_SIN, A_SLOTS, A_SYNC, A_TABLE, A_THREAD_NUM, ARGS, COUNTERS_AT, DOWN, GATE_UP, GROUP_I8, INT4_DOT,
    O, PHASES, QKV, REC, SEG)
from furca.runtime.numba_cache import link_sources
from furca.runtime.omp_team_kernel import TEAM_SIGNATURE, as_ptr, call_int, fetch_add, load_acquire
from furca.runtime.quant.cpu_int4_dot_kernels import int4_dot16_blocks, quantize_x16
from furca.runtime.quant.cpu_kernels import group_matmul_rows

# the modules whose kernels this one's compiled code contains (numba links them in): its
# disk cache is keyed on their files too
link_sources(__file__, "furca.runtime.attention.cpu_decode_kernel", "furca.runtime.cpu_math_kernel",
             "furca.runtime.models.cpu_glue_kernel", "furca.runtime.models.cpu_step", "furca.runtime.omp_team_kernel",
             "furca.runtime.quant.cpu_int4_dot_kernels", "furca.runtime.quant.cpu_bits",
             "furca.runtime.quant.cpu_kernels")

_SPINS_BEFORE_YIELD = 1 << 12  # a barrier spins this long before giving the core away
_sched_yield = types.ExternalFunction("sched_yield", types.int32())


@njit(inline="always", nogil=True)
def _barrier(counter, target):
    """Arrive at the step's barrier counter, wait until ``target`` arrivals. Stores before
    it are visible to every thread after it (seq_cst add, acquire load)."""
    fetch_add(counter, 1)
    spins = 0
    while load_acquire(counter) < target:
        spins += 1
        if spins == _SPINS_BEFORE_YIELD:  # a loaded machine: let a descheduled team thread run
            _sched_yield()
            spins = 0


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)
def _group_part(x, codes, scale, offset, out, lo, hi):
    """GroupInt8 rows [lo, hi) of one segment: ``out`` is the segment's columns."""
    m_rows, k = x.shape
    groups = scale.shape[1]
    group = k // groups
    xsum = np.empty((m_rows, groups), np.float32)
    for m in range(m_rows):
        for g in range(groups):
            s = np.float32(0.0)
            for j in range(group):
                s += x[m, g * group + j]
            xsum[m, g] = s
    group_matmul_rows(x, xsum, codes, scale, offset, out, lo, hi)


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)
def _int4_part(xq, xd, xsum, words, scale, offset, out, n, lo, hi):
    """Int4Dot blocks [lo, hi) of one segment of ``n`` rows: ``out`` is the segment's
    columns. A last block that is partial (n not a multiple of 16) goes through a scratch
    row, so its padding never lands in the next segment's columns."""
    full = min(hi, n // 16)
    if lo < full:
        int4_dot16_blocks(xq, xd, xsum, words, scale, offset, out, lo, full)
    if hi > full and full == n // 16:
        tail = np.empty((xq.shape[0], 16 * (full + 1)), np.float32)
        int4_dot16_blocks(xq, xd, xsum, words, scale, offset, tail, full, full + 1)
        out[:, 16 * full:n] = tail[:, 16 * full:n]


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)
def _project(rec, base, x, out, counter, xq, xd, xsum):
    """``out = x @ W.T`` for the projection at ``rec[base:]``, the parts this thread
    claims from ``counter``. ``xq`` / ``xd`` / ``xsum``: (M, K) int16 and (M, K / 32) fp32
    scratch for Int4Dot's rounding of x (`quantize_x16`, once per call when a segment
    is Int4Dot)."""
    k = x.shape[1]
    num_segs, num_parts = rec[base], rec[base + 2]
    parts = carray(as_ptr(rec[base + 1]), (num_parts, 3), np.int64)
    for s in range(num_segs):
        if rec[base + 5 + s * SEG] == INT4_DOT:
            quantize_x16(x, xq, xd, xsum)
            break
    p = fetch_add(counter, 1)
    while p < num_parts:
        sb = base + 5 + parts[p, 0] * SEG
        lo, hi = parts[p, 1], parts[p, 2]
        kind, n, groups, off_groups, col = rec[sb], rec[sb + 1], rec[sb + 2], rec[sb + 3], rec[sb + 7]
        if kind == INT4_DOT:
            nb = (n + 15) // 16
            words = carray(as_ptr(rec[sb + 4]), (nb, k // 8, 16), np.uint32)
            scale = carray(as_ptr(rec[sb + 5]), (nb, groups, 16), np.uint16)
            offset = carray(as_ptr(rec[sb + 6]), (nb, groups, 16), np.uint16)
            _int4_part(xq, xd, xsum, words, scale, offset, out[:, col:col + n], n, lo, hi)
        else:
            scale = carray(as_ptr(rec[sb + 5]), (n, groups), np.float32)
            offset = carray(as_ptr(rec[sb + 6]), (n, off_groups), np.float32)
            if kind == GROUP_I8:
                codes = carray(as_ptr(rec[sb + 4]), (n, k), np.int8)
                _group_part(x, codes, scale, offset, out[:, col:col + n], lo, hi)
            else:
                codes = carray(as_ptr(rec[sb + 4]), (n, k), np.uint8)
                _group_part(x, codes, scale, offset, out[:, col:col + n], lo, hi)
        p = fetch_add(counter, 1)


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)
def _attend(q, k_new, v_new, k_cache, v_cache, loc, rows, kv_start, kv_len, kv_indices, scale, out, counter):
    """The (row, KV head) tasks this thread claims: the row's new k / v of that head into
    the pool at ``loc[row]``, then `decode_tasks` for the task (its queries read only
    their own request's slots, the new one included)."""
    num_kv = k_cache.shape[0]
    tasks = rows.shape[0] * num_kv
    t = fetch_add(counter, 1)
    while t < tasks:
        r = t // num_kv
        h = t - r * num_kv
        k_cache[h, loc[r], :] = k_new[t]
        v_cache[h, loc[r], :] = v_new[t]
        decode_tasks(q, k_cache, v_cache, rows, kv_start, kv_len, kv_indices, scale, out, t, t + 1)
        t = fetch_add(counter, 1)


@njit(nogil=True, cache=True, fastmath=True, error_model="numpy", boundscheck=False)
def _step(a):
    m, num_layers, hidden, heads, num_kv = a[A_M], a[A_LAYERS], a[A_HIDDEN], a[A_HEADS], a[A_KV_HEADS]
    dim, inter, slots = a[A_HEAD_DIM], a[A_INTER], a[A_SLOTS]
    team = call_int(a[A_NUM_THREADS])
    floats = carray(as_ptr(a[A_FLOATS]), 2, np.float32)
    eps, scale = floats[0], floats[1]
    table = carray(as_ptr(a[A_TABLE]), (num_layers, REC), np.int64)
    sync = a[A_SYNC]
    qdim = heads * dim
    h_in = carray(as_ptr(a[A_H]), (m, hidden), np.float32)
    delta = carray(as_ptr(a[A_DELTA]), (m, hidden), np.float32)
    cos = carray(as_ptr(a[A_COS]), (m, dim // 2), np.float32)
    sin = carray(as_ptr(a[A_SIN]), (m, dim // 2), np.float32)
    loc = carray(as_ptr(a[A_LOC]), m, np.int64)
    rows = carray(as_ptr(a[A_ROWS]), m, np.int64)
    kv_start = carray(as_ptr(a[A_KV_START]), m, np.int64)
    kv_len = carray(as_ptr(a[A_KV_LEN]), m, np.int64)
    kv_indices = carray(as_ptr(a[A_KV_INDICES]), a[A_NUM_INDICES], np.int64)
    qkv = carray(as_ptr(a[A_QKV]), (m, qdim + 2 * num_kv * dim), np.float32)
    attn = carray(as_ptr(a[A_ATTN]), (m, heads, dim), np.float32)
    attn_rows = carray(as_ptr(a[A_ATTN]), (m, qdim), np.float32)
    gate_up = carray(as_ptr(a[A_GATE_UP]), (m, 2 * inter), np.float32)
    # this thread's copies
    residual = h_in.copy()
    xn = np.empty((m, hidden), np.float32)
    act = np.empty((m, inter), np.float32)
    q = np.empty((m, heads, dim), np.float32)
    k_new = np.empty((m * num_kv, dim), np.float32)
    v_new = np.empty((m * num_kv, dim), np.float32)
    no_slots = np.empty(0, np.int64)
    xq_h, xd_h, xs_h = (np.empty((m, hidden), np.int16), np.empty((m, hidden // 32), np.float32),
                        np.empty((m, hidden // 32), np.float32))
    xq_a, xd_a, xs_a = (np.empty((m, qdim), np.int16), np.empty((m, qdim // 32), np.float32),
                        np.empty((m, qdim // 32), np.float32))
    xq_i, xd_i, xs_i = (np.empty((m, inter), np.int16), np.empty((m, inter // 32), np.float32),
                        np.empty((m, inter // 32), np.float32))
    arrived = 0
    for layer in range(num_layers):
        rec = table[layer]
        counter = sync + 8 * (COUNTERS_AT + PHASES * layer)
        k_cache = carray(as_ptr(rec[2]), (num_kv, slots, dim), np.float32)
        v_cache = carray(as_ptr(rec[3]), (num_kv, slots, dim), np.float32)
        add_rms_norm_rows(delta, residual, carray(as_ptr(rec[0]), hidden, np.float32), eps, xn, layer > 0)
        _project(rec, QKV, xn, qkv, counter, xq_h, xd_h, xs_h)
        arrived += team
        _barrier(sync, arrived)
        rope_qkv_rows(qkv, cos, sin, q, k_new, v_new, k_new.reshape((1, m * num_kv, dim)),
                      v_new.reshape((1, m * num_kv, dim)), no_slots)
        _attend(q, k_new, v_new, k_cache, v_cache, loc, rows, kv_start, kv_len, kv_indices, scale, attn, counter + 8)
        arrived += team
        _barrier(sync, arrived)
        _project(rec, O, attn_rows, delta, counter + 16, xq_a, xd_a, xs_a)
        arrived += team
        _barrier(sync, arrived)
        add_rms_norm_rows(delta, residual, carray(as_ptr(rec[1]), hidden, np.float32), eps, xn, True)
        _project(rec, GATE_UP, xn, gate_up, counter + 24, xq_h, xd_h, xs_h)
        arrived += team
        _barrier(sync, arrived)
        silu_mul_rows(gate_up, act)
        _project(rec, DOWN, act, delta, counter + 32, xq_i, xd_i, xs_i)
        arrived += team
        _barrier(sync, arrived)
    if call_int(a[A_THREAD_NUM]) == 0:
        carray(as_ptr(a[A_RESIDUAL]), (m, hidden), np.float32)[:] = residual


@cfunc(TEAM_SIGNATURE, nogil=True, cache=True, fastmath=True, error_model="numpy")
def step_team(pargs):
    """Every decoder layer of one decode step over an fp32 KV pool, run by every thread
    of an OpenMP team: ``pargs`` laid out as the ``A_*`` indices say."""
    _step(carray(pargs, ARGS))
