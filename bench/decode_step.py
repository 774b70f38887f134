"""Decode-step time in the engine: the CPU decode kernel (`attention/cpu_decode.py`)
against the gather + SDPA path, same engine, same process, alternating.

The 32 prompts of `vs_transformers.py`'s mixed workload are prefilled together, then
decoded for `--steps` tokens each; every forward pass whose rows are all decode rows of
all 32 requests is timed (wall clock around `ModelRunner.forward`). Reports the median
and the minimum per path and their ratio.

    .venv/bin/python bench/decode_step.py [--steps 30] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics

from _util import add_threads_arg, save, set_threads, time_full_decode_steps
from vs_transformers import draw_workload

from furca.runtime.engine import Engine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    with Engine(model=None, dtype="float32") as engine:
        runner = engine.scheduler.runner
        backend = runner.attn_backend
        reqs = draw_workload(engine.tokenizer.vocab_size, engine.tokenizer.special_token_ids)
        prompts = [p for p, _ in reqs]
        params = [{"max_new_tokens": args.steps, "temperature": 0.0, "ignore_eos": True}] * len(prompts)
        times = time_full_decode_steps(runner, len(prompts))
        engine.generate(input_ids=prompts[:2], sampling_params=params[:2])  # warm-up: compile the kernel
        per_path: dict[str, list[float]] = {"kernel": [], "gather": []}
        for _ in range(args.rounds):
            for name in ("gather", "kernel"):
                backend.direct_decode = name == "kernel"
                engine.flush_cache()
                times.clear()
                engine.generate(input_ids=prompts, sampling_params=params)
                per_path[name].extend(times)
        backend.direct_decode = True

    stats = {k: (statistics.median(v) * 1e3, min(v) * 1e3, len(v)) for k, v in per_path.items()}
    for name, (med, low, n) in stats.items():
        print(f"{name:6s}: 32-row decode step median {med:6.1f} ms, min {low:6.1f} ms ({n} steps)")
    ratio = stats["gather"][0] / stats["kernel"][0]
    print(f"gather / kernel (median): {ratio:.2f}x")
    print(f"appended to {save('decode_step', dict(bench='decode_step', steps=args.steps, rounds=args.rounds, kernel_median_ms=round(stats['kernel'][0], 1), kernel_min_ms=round(stats['kernel'][1], 1), gather_median_ms=round(stats['gather'][0], 1), gather_min_ms=round(stats['gather'][1], 1), ratio=round(ratio, 3)))}")


if __name__ == "__main__":
    main()
