"""Batch-1 decode step time against the memory-bandwidth floor, default model, fp32.

floor = bytes of weights read per decode step / memory bandwidth, where bandwidth is
measured here by a large tensor copy (bytes read + written per second) and the
weights read per step are every parameter once (the tied embedding is read once, as
the LM head; the input embedding lookup reads one row). Reports step time / floor.

    .venv/bin/python bench/bandwidth_floor.py [--tokens 128]
"""

from __future__ import annotations

import argparse
import time

import torch
from _util import save

from furca.runtime.engine import Engine


def copy_bandwidth(num_bytes: int = 512 << 20, repeats: int = 5) -> float:
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * num_bytes / best  # read + write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    bw = copy_bandwidth()
    with Engine(model=None, dtype="float32") as engine:
        model = engine.model
        seen, weight_bytes = set(), 0
        for p in model.parameters():
            if p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            weight_bytes += p.numel() * p.element_size()
        prompt_ids = engine.tokenizer.encode("The lighthouse keeper", add_special_tokens=True)
        params = {"max_new_tokens": args.tokens, "temperature": 0.0, "ignore_eos": True}
        engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": 4})
        engine.flush_cache()
        short = {**params, "max_new_tokens": 1}
        t0 = time.perf_counter()
        engine.generate(input_ids=prompt_ids, sampling_params=short)
        t_prefill = time.perf_counter() - t0
        engine.flush_cache()
        t0 = time.perf_counter()
        engine.generate(input_ids=prompt_ids, sampling_params=params)
        total = time.perf_counter() - t0
    step = (total - t_prefill) / (args.tokens - 1)
    floor = weight_bytes / bw
    print(f"copy bandwidth {bw / 1e9:.1f} GB/s; weights {weight_bytes / 1e6:.1f} MB; floor {floor * 1e3:.2f} ms/step")
    print(f"batch-1 decode step {step * 1e3:.2f} ms -> {step / floor:.2f}x the bandwidth floor")
    print(f"appended to {save('bandwidth_floor', dict(bandwidth_gb_s=round(bw / 1e9, 2), weight_mb=round(weight_bytes / 1e6, 1), floor_ms=round(floor * 1e3, 3), step_ms=round(step * 1e3, 3), ratio=round(step / floor, 2)))}")


if __name__ == "__main__":
    main()
