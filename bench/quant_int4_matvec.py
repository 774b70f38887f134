"""furca's own int4 matvec (Int4Dot: numba) against torch's int4 op, in one process.

    nice -n -10 .venv/bin/python bench/quant_int4_matvec.py [--rounds 5] [--layers 30] [--ms 1,2,4]
        [--threads 1,2] [--clock wall|thread] [--hot 0]

The default model's own GGUF file gives the weights: every layer's Q4_1 projections as
the engine fuses them (qkv 960x576, o 576x576, gate_up 3072x576, down 576x1536), packed
two ways: ``Int4Packed`` (torch's CPU int4 pack, ``_weight_int4pack_mm_for_cpu``, bf16
x and bf16 scale / zero) and ``Int4Dot`` (bf16 x rounded to int16 per group
of 32, integer VNNI dot products ``vpdpbusd`` on two int8 halves, bf16 out, ``cpu_int4_dot_kernels``; and the
same weight with x rounded to int8, ``vpdpbusd``: ``x_bits = 8``). One set is all
``--layers`` layers' projections (distinct weights, so none stays in cache between uses). Each round times one set per
kernel, alternating: on one thread, then on 2 threads with a parallel torch op (an add
of 64K elements) before every call, as a decode step has torch ops between its matmuls
(furca's kernels run as cfuncs on torch's OpenMP team there). Only the matmul calls are
timed. It prints the median and best ns per weight (a whole call over all M rows) of
each (M, threads, kernel), the rounds, the load average, and the error of each kernel
(and of x rounded to int8 per group of 32, emulated exactly in fp64) against
dequantize-then-F.linear in fp64, relative to max |y|, at M = 1, 7 and 64 (bf16 x as the
engine's decode gives it, and fp32 x: the rounding of x alone).

On a loaded machine: ``--threads 1 --clock thread`` times each call in the calling
thread's CPU time (``time.thread_time``: one thread computes the whole call then), which
a descheduled thread does not inflate. ``--hot N``: instead of the sets, one gate_up
weight (3072x576) called N times in a row per round, so it stays in L2: the kernels'
compute speed without the memory stream.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from furca.runtime.loader.gguf import read_gguf
from furca.runtime.quant.groups import QuantGroups
from furca.runtime.quant.int4_dot import Int4Dot, vnni_available
from furca.runtime.quant.packed import Int4Packed

GGUF = Path("~/.cache/furca/gguf/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
KINDS = ("torch", "dot16", "dot8")
FUSED = (("q_proj", "k_proj", "v_proj"), ("o_proj",), ("gate_proj", "up_proj"), ("down_proj",))


def load_projections(layers: int) -> list[QuantGroups]:
    tensors = {name: w for name, w in read_gguf(GGUF).tensors(keep_quantized=True)
               if isinstance(w, QuantGroups) and ".layers." in name}
    out = []
    for i in range(layers):
        for names in FUSED:
            parts = [tensors[f"model.layers.{i}.{'self_attn' if 'proj' in n and n[0] in 'qkvo' else 'mlp'}.{n}.weight"]
                     for n in names]
            out.append(QuantGroups.cat(parts) if len(parts) > 1 else parts[0])
    return out


def int8_x_dot(x: np.ndarray, w: QuantGroups) -> np.ndarray:
    """x quantized to int8 per block of 32 (symmetric, scale max|x| / 127), dotted exactly
    with the codes, one scale per block: llama.cpp's Q4_1 x Q8_1 arithmetic, in fp64."""
    m, k = x.shape
    xb = x.reshape(m, -1, 32).astype(np.float64)
    d = np.abs(xb).max(axis=2, keepdims=True) / 127.0
    xq = np.round(xb / np.where(d == 0, 1, d))
    q = w.codes.numpy().astype(np.float64).reshape(w.shape[0], -1, 32)
    dots = np.einsum("mgj,ngj->mng", xq, q)  # exact integers
    s, o = w.scale.numpy().astype(np.float64), w.offset.numpy().astype(np.float64)
    return (dots * (d[..., 0][:, None, :] * s[None]) + (xb * 1.0).sum(2)[:, None, :] * o[None]).sum(2)


def errors(w: QuantGroups, torch_p: Int4Packed, dot: Int4Dot, dot8: Int4Dot,
           m: int) -> dict[str, float]:
    x = torch.randn(m, w.shape[1])
    ref = (x.double() @ w.dequantize().double().t()).numpy()
    scale = np.abs(ref).max()
    xb = x.to(torch.bfloat16)
    ref_b = (xb.double() @ w.dequantize().double().t()).numpy()  # the bf16 x itself, exact
    got = {"torch int4 (bf16 x)": torch_p.matmul(xb).double().numpy(),
           "Int4Dot int16 x (fp32 x, out)": dot.matvec(x).double().numpy(),
           "Int4Dot int8 x (fp32 x, out)": dot8.matvec(x).double().numpy(),
           "int8 x per block": int8_x_dot(x.numpy(), w)}
    out = {name: float(np.abs(y - ref).max() / scale) for name, y in got.items()}
    out["Int4Dot int16 x (bf16 x, out) vs the bf16 x"] = float(
        np.abs(dot.matvec(xb).double().numpy() - ref_b).max() / np.abs(ref_b).max())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--ms", default="1,2,4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    ap.add_argument("--hot", type=int, default=0)
    args = ap.parse_args()
    ws = load_projections(args.layers)
    torch_ps = [Int4Packed(w, 32) for w in ws]
    assert vnni_available(), "Int4Dot needs AVX512_VNNI"
    dots = [Int4Dot.pack(w) for w in ws]
    dots8 = [Int4Dot(d.words, d.scale, d.offset, d.shape) for d in dots]  # the same arrays
    for d in dots8:
        d.x_bits = 8
    assert all(d is not None for d in dots), "a Q4_1 tensor's d / m did not fit fp16"
    weights = sum(w.shape[0] * w.shape[1] for w in ws)
    print(f"{len(ws)} weights, {weights / 1e6:.1f}M weights; resident MB: torch pack "
          f"{sum(p.nbytes for p in torch_ps) / 1e6:.1f}, "
          f"Int4Dot {sum(c.nbytes for c in dots) / 1e6:.1f}")

    big, buf = torch.randn(1 << 16), torch.empty(1 << 16)

    thread_counts = [int(v) for v in args.threads.split(",")]
    assert args.clock == "wall" or thread_counts == [1], "--clock thread times one thread: --threads 1"
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    sets = list(zip(torch_ps, dots, dots8))
    if args.hot:
        sets = [sets[2]] * args.hot  # one gate_up weight, again and again
        weights = args.hot * ws[2].shape[0] * ws[2].shape[1]

    def run_set(kind: str, m: int, threads: int) -> float:
        xs = {k: torch.randn(m, k) for k in (576, 1536)}
        xb = {k: v.to(torch.bfloat16) for k, v in xs.items()}
        total = 0.0
        for p, dt, d8 in sets:
            if threads > 1:
                torch.add(big, 1.0, out=buf)
            t = clock()
            if kind == "torch":
                p._small(xb[p.shape[1]])
            elif kind == "dot16":
                dt.matvec(xb[dt.shape[1]], threads)
            else:
                d8.matvec(xb[d8.shape[1]], threads)
            total += clock() - t
        return total * 1e9 / weights

    ms = [int(v) for v in args.ms.split(",")]
    results = {(m, th, kind): [] for m in ms for th in thread_counts for kind in KINDS}
    for th in thread_counts:  # warm-up: compile, page in
        torch.set_num_threads(th)
        for kind in KINDS:
            run_set(kind, 1, th)
    for _ in range(args.rounds):
        for m in ms:
            for th in thread_counts:
                torch.set_num_threads(th)
                for kind in KINDS:
                    results[(m, th, kind)].append(run_set(kind, m, th))
    load = os.getloadavg()
    print(f"ns per weight ({args.clock} clock{', one weight hot' if args.hot else ''}), median (best) of the rounds:")
    print("| M | threads | torch int4 | Int4Dot int16 x | Int4Dot int8 x | int16 / torch | int8 / torch |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for m in ms:
        for th in thread_counts:
            med = [statistics.median(results[(m, th, kind)]) for kind in KINDS]
            best = [min(results[(m, th, kind)]) for kind in KINDS]
            cells = " | ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(med, best))
            ratios = " | ".join(f"{med[i] / med[0]:.2f} ({best[i] / best[0]:.2f})" for i in (1, 2))
            print(f"| {m} | {th} | {cells} | {ratios} |")
    print("rounds (ns/weight): " + "; ".join(
        f"M{m} t{th} {kind} " + " ".join(f"{v:.3f}" for v in results[(m, th, kind)])
        for m in ms for th in thread_counts for kind in KINDS))
    print(f"load {load}")
    torch.set_num_threads(2)
    for i, m in enumerate((1, 7, 64)):
        j = (2 + 4 * i) % len(ws)  # a gate_up weight
        w = ws[j]
        errs = errors(w, torch_ps[j], dots[j], dots8[j], m)
        print(f"error vs dequantize + F.linear (fp64), M={m}, {w.shape[0]}x{w.shape[1]}, relative to max |y|: "
              + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))


if __name__ == "__main__":
    main()
