"""The CPU decode-attention kernel alone (`attention/cpu_decode.py`'s `decode_tasks`):
the kernel as it is now against a copy of the previous one (kept below as the
baseline, compiled here without cache), same inputs, same process, runs alternating.

Shapes: 32 decode requests, about 12,500 context tokens in all (prompt lengths
20-500 plus 0-255 decoded tokens, seeded, scaled to the total), pool laid out as the
engine fills it: each prompt's slots contiguous, then the decode tokens interleaved
with stride 32 (one per request per step). `smollm2`: 3 KV heads, G=3, head_dim 64
(SmolLM2-135M); `g8_d128`: 2 KV heads, G=8, head_dim 128. fp32.

Time: single-threaded, one call over all tasks, thread CPU time (`time.thread_time`),
best of `--repeats`. Also prints the largest absolute difference of the outputs.

    .venv/bin/python bench/cpu_decode_kernel.py [--repeats 40] [--tokens 12500]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from numba import njit

from furca.runtime.attention.cpu_decode import get_decode


@njit(fastmath=True, nogil=True)
def old_decode_tasks(q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, scale, out, lo, hi):
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


def new_decode_tasks():
    decode = get_decode()
    if decode is None:
        raise SystemExit("numba kernel disabled (FURCA_NO_NUMBA) or numba missing")
    return decode.__closure__[decode.__code__.co_freevars.index("decode_tasks")].cell_contents


def make_shape(num_kv_heads: int, group: int, head_dim: int, n: int = 32, tokens: int = 12500, seed: int = 0):
    rng = np.random.default_rng(seed)
    prompt, dec = rng.integers(20, 500, n), rng.integers(0, 256, n)
    f = tokens / (prompt + dec).sum()
    prompt = np.maximum(1, (prompt * f).astype(np.int64))
    dec = (dec * f).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(prompt)[:-1]])
    base = int(prompt.sum())  # decode tokens after all prompts, one per request per step
    slots = [np.concatenate([np.arange(first[r], first[r] + prompt[r]), base + np.arange(dec[r]) * n + r])
             for r in range(n)]
    kv_len = np.array([len(s) for s in slots], np.int64)
    kv_start = np.concatenate([[0], np.cumsum(kv_len)[:-1]]).astype(np.int64)
    kv_indices = np.concatenate(slots).astype(np.int64)
    num_slots = base + int(dec.max()) * n + n
    heads = num_kv_heads * group
    q = rng.standard_normal((n, heads, head_dim), dtype=np.float32)
    k_buf = rng.standard_normal((num_kv_heads, num_slots, head_dim), dtype=np.float32)
    v_buf = rng.standard_normal((num_kv_heads, num_slots, head_dim), dtype=np.float32)
    rows = np.arange(n, dtype=np.int64)
    return (q, k_buf, v_buf, rows, kv_start, kv_len, kv_indices, np.float32(head_dim ** -0.5)), int(kv_len.sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=12500)
    args = ap.parse_args()
    new = new_decode_tasks()
    print(f"cpu: {os.cpu_count()} cores; single thread, thread CPU time, best of {args.repeats}")
    for name, (kv, g, d) in {"smollm2": (3, 3, 64), "g8_d128": (2, 8, 128)}.items():
        inputs, total = make_shape(kv, g, d, tokens=args.tokens)
        tasks = inputs[5].shape[0] * kv
        outs = {"old": np.zeros_like(inputs[0]), "new": np.zeros_like(inputs[0])}
        fns = {"old": old_decode_tasks, "new": new}
        best = {"old": float("inf"), "new": float("inf")}
        for k in fns:  # compile / warm up
            fns[k](*inputs, outs[k], 0, tasks)
        for _ in range(args.repeats):
            for k in fns:
                t = time.thread_time()
                fns[k](*inputs, outs[k], 0, tasks)
                best[k] = min(best[k], time.thread_time() - t)
        diff = float(np.abs(outs["old"] - outs["new"]).max())
        print(f"{name:8s} KV={kv} G={g} D={d} context={total}: old {best['old'] * 1e3:.3f} ms  "
              f"new {best['new'] * 1e3:.3f} ms  speedup {best['old'] / best['new']:.2f}x  max|diff| {diff:.1e}")


if __name__ == "__main__":
    main()
