"""CPU decode on the default model: bf16 vs fp32 linear projections, and one OpenMP pool vs two.

    .venv/bin/python bench/cpu_linear_dtype.py [--threads N] [--skip-engine]

1. ``projections``: the default model's 30 layers of projection GEMMs (q/k/v, o,
   gate/up, down: 120 GEMMs with its real shapes) at M = 1, 8, 32 and 256 rows, fp32
   weights vs bf16 weights, median of 5; the ratio is what ``linear_dtype="bfloat16"``
   buys on this CPU (``furca.runtime.cpu_features.has_native_bf16`` says whether the
   engine's ``auto`` picks it here).
2. ``engine``: decode milliseconds per step at batch 1 and 32 (the difference of two
   greedy runs of 16 and 80 new tokens, EOS ignored, divided by 64), for
   ``linear_dtype`` float32 and bfloat16 (the KV cache follows: ``kv_cache_dtype="auto"``
   stores bf16 K/V with bf16 projections), each (a) as the engine runs by itself and (b)
   after the main thread has run one parallel torch op, so that libgomp holds a second
   OpenMP pool next to the scheduler thread's (what the engine did to itself before its
   set-up moved to a short-lived thread; ``docs/runtime.md``, "One OpenMP pool"). Case
   (b) runs last, in a child process of its own, since a pool never leaves its thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from _util import add_threads_arg, save, set_threads


def projections(threads: int | None) -> dict:
    from furca.runtime.model_config import ModelConfig
    from furca.runtime.pull import pull_default_model
    from furca.runtime.loader.hf import read_json

    cfg = ModelConfig.from_hf_dict(read_json(pull_default_model(progress=False) / "config.json"))
    hidden, inter = cfg.hidden_size, cfg.intermediate_size
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim
    shapes = [(qkv, hidden), (hidden, cfg.num_attention_heads * cfg.head_dim), (2 * inter, hidden),
              (hidden, inter)] * cfg.num_hidden_layers
    out = {}
    for m in (1, 8, 32, 256):
        row = {}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            ws = [torch.randn(o, i).to(dtype) for o, i in shapes]
            xs = {i: torch.randn(m, i).to(dtype) for _, i in shapes}

            def run():
                for w in ws:
                    torch.nn.functional.linear(xs[w.shape[1]], w)

            run()
            times = []
            for _ in range(5):
                t = time.perf_counter()
                run()
                times.append(time.perf_counter() - t)
            row[name] = statistics.median(times) * 1e3
        out[m] = row
        print(f"projections M={m:3d}: fp32 {row['fp32']:7.1f} ms, bf16 {row['bf16']:7.1f} ms -> "
              f"{row['fp32'] / row['bf16']:.2f}x", flush=True)
    return out


def engine_steps(linear_dtype: str, second_pool: bool) -> dict:
    from furca.runtime.engine import Engine

    if second_pool:  # a parallel region on the main thread: libgomp gives it a pool of its own
        torch.randn(2048, 2048) @ torch.randn(2048, 2048)
    with Engine(max_total_tokens=8192, dtype="float32", linear_dtype=linear_dtype) as engine:  # KV: auto
        tok = engine.tokenizer
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Write a story about a robot."}]))
        out = {}
        for batch in (1, 32):
            def run(n: int) -> float:
                t = time.perf_counter()
                engine.generate(input_ids=[prompt] * batch,
                                sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True})
                return time.perf_counter() - t

            run(16)  # warm-up
            short = min(run(16) for _ in range(2))
            long = min(run(80) for _ in range(2))
            out[batch] = (long - short) / 64 * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("LINEAR_DTYPE", "SECOND_POOL"), help=argparse.SUPPRESS)
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)
    if args.child:  # one engine measurement, printed for the parent
        print(json.dumps(engine_steps(args.child[0], args.child[1] == "1")))
        return

    from furca.runtime.cpu_features import has_native_bf16

    record = {"bench": "cpu_linear_dtype", "native_bf16": has_native_bf16(), "projections_ms": projections(args.threads)}
    if not args.skip_engine:
        steps = {}
        for second_pool in (False, True):
            for linear_dtype in ("float32", "bfloat16"):
                cmd = [sys.executable, __file__, "--child", linear_dtype, "1" if second_pool else "0"]
                if args.threads:
                    cmd += ["--threads", str(args.threads)]
                lines = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()
                res = {int(k): v for k, v in json.loads(lines[-1]).items()}
                key = f"{linear_dtype}{', second OpenMP pool' if second_pool else ''}"
                steps[key] = res
                print(f"engine decode step, linear {key}: batch 1 {res[1]:.1f} ms, batch 32 {res[32]:.1f} ms", flush=True)
        record["engine_step_ms"] = steps
    print(f"appended to {save('cpu_linear_dtype', record)}")


if __name__ == "__main__":
    main()
