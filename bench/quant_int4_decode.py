"""Batch-1 decode of the default model's own GGUF with its Q4_1 projections in Int4Dot
(furca's VNNI kernel) against torch's int4 pack, two engines in one process, alternating.

    nice -n -10 .venv/bin/python bench/quant_int4_decode.py [--threads 2] [--rounds 5] [--tokens 48]
        [--clock wall|process] [--x-bits 16|8] [--linear-dtype auto|bfloat16|float32]

Both engines load ``SmolLM2-135M-Instruct.Q4_1.gguf`` with ``quantization="auto"``; the
first with ``packed.INT4_DOT`` on (Q4_1 -> ``Int4Dot``), the second with it off (Q4_1 ->
``Int4Packed``, torch's ``_weight_int4pack_mm_for_cpu``). Each round times ``--tokens``
greedy tokens (EOS ignored) after the same prompt minus an 8-token run (prompt and first
step cancel), once per engine; it prints the median and best ms per token of each, the
rounds, the 1-minute load average, and both engines' first 24 greedy tokens.
``--x-bits``: Int4Dot's rounding of x (16, the default, or 8). ``--linear-dtype``: both
engines' (auto: bf16 on a CPU with native bf16 dot products, else fp32, where torch's
int4 op takes an fp32 x and is several times slower). ``--clock process``: the
process's CPU time instead of wall time (for ``--threads 1`` on a loaded machine, where a
descheduled thread inflates wall time; with more threads torch's spinning workers count).
FURCA_CPU_STEP=0 keeps both engines on the per-op path (the compiled decode step takes
fp32 models with Int4Dot weights: furca/runtime/models/cpu_step.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

GGUF = Path("~/.cache/furca/gguf/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--clock", choices=("wall", "process"), default="wall")
    ap.add_argument("--x-bits", type=int, choices=(16, 8), default=16)
    ap.add_argument("--linear-dtype", default="auto")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from furca import Engine
    from furca.runtime.quant import packed
    from furca.runtime.quant.int4_dot import Int4Dot

    Int4Dot.x_bits = args.x_bits
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    engines = {}
    for name, on in (("Int4Dot", True), ("torch int4", False)):
        packed.INT4_DOT = on
        engines[name] = Engine(str(GGUF), quantization="auto", linear_dtype=args.linear_dtype)
    packed.INT4_DOT = True
    prompt = "Write a long story about a lighthouse keeper."

    def run(eng, n: int) -> tuple[float, str]:
        t = clock()
        out = eng.generate(prompt, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        return clock() - t, out["text"]

    texts = {name: run(eng, 24)[1] for name, eng in engines.items()}  # warm-up
    ms = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, eng in engines.items():
            ms[name].append(1e3 * (run(eng, args.tokens)[0] - run(eng, 8)[0]) / (args.tokens - 8))
    load = os.getloadavg()[0]
    linear_dtype = next(iter(engines.values())).effective_config()["linear_dtype"]
    for eng in engines.values():
        eng.shutdown()
    for name, v in ms.items():
        print(f"{name}: median {statistics.median(v):.2f} ms/token, best {min(v):.2f} "
              f"(rounds {', '.join(f'{x:.2f}' for x in v)})")
    print(f"load {load:.2f}, threads {args.threads}, {args.clock} clock, Int4Dot x_bits {args.x_bits}, "
          f"linear_dtype {linear_dtype}, "
          f"FURCA_CPU_STEP={os.environ.get('FURCA_CPU_STEP', '(unset)')}")
    for name, text in texts.items():
        print(f"{name}: {text!r}")


if __name__ == "__main__":
    main()
