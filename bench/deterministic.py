"""The cost of `Engine(deterministic=True)`: prefill and decode tokens/s with and without
batch-invariant products and attention, same weights, same process, alternating.

Both engines share one loaded copy of the default model in ``--dtype`` (float32: the
all-fp32 engine; the invariant products run in the projections' dtype either way).
Prefill: ``--prefill-tokens`` prompt tokens of few-shot text, one request, the cache
flushed, one output token (wall time of the call). Decode: ``--batch`` requests decoding
``--steps`` tokens each; every forward pass whose rows are all decode rows of the batch
is timed (`time_full_decode_steps`). Median over ``--rounds``.

    .venv/bin/python bench/deterministic.py [--batch 1 8] [--steps 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _util import add_threads_arg, few_shot_prefix, machine, save, set_threads, time_full_decode_steps

from furca.runtime.engine import Engine
from furca.runtime.loader import load_model


def measure(engine: Engine, prompt_ids: list[int], batches: list[int], steps: int) -> dict:
    runner = engine.scheduler.runner
    engine.flush_cache()
    t = time.perf_counter()
    engine.generate(input_ids=prompt_ids, sampling_params={"max_new_tokens": 1, "temperature": 0})
    out = {"prefill_tok_s": len(prompt_ids) / (time.perf_counter() - t)}
    for b in batches:
        times = time_full_decode_steps(runner, b)
        prompts = [prompt_ids[i * 7:i * 7 + 32] for i in range(b)]
        engine.generate(input_ids=prompts, sampling_params={"max_new_tokens": steps, "temperature": 0,
                                                            "ignore_eos": True})
        runner.forward = type(runner).forward.__get__(runner)  # unwrap
        out[f"decode_b{b}_tok_s"] = b / statistics.median(times)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefill-tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    loaded = load_model(None, dtype=args.dtype, device="cpu")
    prompt = loaded.tokenizer.encode(few_shot_prefix(loaded.tokenizer, args.prefill_tokens))[:args.prefill_tokens]
    engines = {name: Engine(loaded, max_total_tokens=8192, deterministic=name == "deterministic",
                            decode_log_interval=0, log_capacity=False)
               for name in ("default", "deterministic")}
    results: dict[str, list[dict]] = {name: [] for name in engines}
    try:
        for name, engine in engines.items():  # warm-up: numba kernels, first-call allocations
            engine.generate(input_ids=prompt[:16], sampling_params={"max_new_tokens": 2, "temperature": 0})
        for _ in range(args.rounds):
            for name, engine in engines.items():
                results[name].append(measure(engine, prompt, args.batch, args.steps))
    finally:
        for engine in engines.values():
            engine.shutdown()
    summary = {name: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]} for name, rs in results.items()}
    for name, row in summary.items():
        print(f"{name:13s} " + "  ".join(f"{k} {v:8.1f}" for k, v in row.items()))
    ratios = {k: round(summary["deterministic"][k] / summary["default"][k], 3) for k in summary["default"]}
    print("deterministic / default:", ratios, "load", machine()["loadavg_1m"])
    print(f"appended to {save('deterministic', dict(bench='deterministic', dtype=args.dtype, rounds=args.rounds, steps=args.steps, summary=summary, ratios=ratios))}")


if __name__ == "__main__":
    main()
