"""bf16 vs fp32 KV cache on CPU: 32-row decode steps over long contexts.

    .venv/bin/python bench/kv_dtype.py [--rounds 2] [--steps 40] [--threads N]

The 32 prompts of `vs_transformers.py`'s mixed workload (9,089 prompt tokens) are
prefilled together and decoded for ``--steps`` tokens; every forward pass whose rows are
all decode rows of all 32 requests is timed (wall clock around ``ModelRunner.forward``).
The default engine (bf16 projections on a CPU with native bf16) runs once with
``kv_cache_dtype="float32"`` and once with ``"bfloat16"`` (what ``auto`` picks there),
each in a child process, alternating for ``--rounds``. A bf16 pool halves the bytes
the decode kernel reads per context token (``attention/cpu_decode.py`` widens each row
to fp32 as it reads it) and doubles the tokens the pool holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from _util import add_threads_arg, save, set_threads, time_full_decode_steps


def child(kv: str, steps: int) -> dict:
    from vs_transformers import draw_workload

    from furca.runtime.engine import Engine

    with Engine(model=None, kv_cache_dtype=kv) as engine:
        runner = engine.scheduler.runner
        reqs = draw_workload(engine.tokenizer.vocab_size, engine.tokenizer.special_token_ids)
        times = time_full_decode_steps(runner, len(reqs))
        engine.generate(input_ids=[p for p, _ in reqs],
                        sampling_params=[{"max_new_tokens": steps, "temperature": 0.0, "ignore_eos": True}] * len(reqs))
        return {"kv": str(runner.kv_cache.dtype), "linear": str(engine.loaded.model.linear_dtype),
                "median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3, "steps": len(times),
                "bytes_per_token": runner.bytes_per_token}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    runs: dict[str, list[dict]] = {"float32": [], "bfloat16": []}
    for _ in range(args.rounds):
        for kv in runs:
            cmd = [sys.executable, __file__, "--child", kv, "--steps", str(args.steps)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            res = json.loads(out)
            runs[kv].append(res)
            print(f"KV {res['kv']} (projections {res['linear']}): 32-row decode step median {res['median_ms']:.1f} ms, "
                  f"min {res['min_ms']:.1f} ms over {res['steps']} steps; {res['bytes_per_token']} bytes/token",
                  flush=True)
    med = {kv: statistics.median(r["median_ms"] for r in rs) for kv, rs in runs.items()}
    print(f"fp32 / bf16 KV, median of medians: {med['float32'] / med['bfloat16']:.3f}x")
    print(f"appended to {save('kv_dtype', {'bench': 'kv_dtype', 'runs': runs})}")


if __name__ == "__main__":
    main()
