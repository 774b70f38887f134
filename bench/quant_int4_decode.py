"""Batch-1 decode of the default model's own GGUF with its Q4_1 projections in Int4Dot
(furca's VNNI kernel) against torch's int4 pack, two engines in one process, alternating.

    nice -n -10 .venv/bin/python bench/quant_int4_decode.py [--threads 2] [--rounds 5] [--tokens 48]

Both engines load ``SmolLM2-135M-Instruct.Q4_1.gguf`` with ``quantization="auto"``; the
first with ``packed.INT4_DOT`` on (Q4_1 -> ``Int4Dot``), the second with it off (Q4_1 ->
``Int4Packed``, torch's ``_weight_int4pack_mm_for_cpu``). Each round times ``--tokens``
greedy tokens (EOS ignored) after the same prompt minus an 8-token run (prompt and first
step cancel), once per engine; it prints the median and best ms per token of each, the
rounds, the 1-minute load average, and both engines' first 24 greedy tokens.
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
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from furca import Engine
    from furca.runtime.quant import packed

    engines = {}
    for name, on in (("Int4Dot", True), ("torch int4", False)):
        packed.INT4_DOT = on
        engines[name] = Engine(str(GGUF), quantization="auto")
    packed.INT4_DOT = True
    prompt = "Write a long story about a lighthouse keeper."

    def run(eng, n: int) -> tuple[float, str]:
        t = time.perf_counter()
        out = eng.generate(prompt, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        return time.perf_counter() - t, out["text"]

    texts = {name: run(eng, 24)[1] for name, eng in engines.items()}  # warm-up
    ms = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, eng in engines.items():
            ms[name].append(1e3 * (run(eng, args.tokens)[0] - run(eng, 8)[0]) / (args.tokens - 8))
    load = os.getloadavg()[0]
    for eng in engines.values():
        eng.shutdown()
    for name, v in ms.items():
        print(f"{name}: median {statistics.median(v):.2f} ms/token, best {min(v):.2f} "
              f"(rounds {', '.join(f'{x:.2f}' for x in v)})")
    print(f"load {load:.2f}, threads {args.threads}")
    for name, text in texts.items():
        print(f"{name}: {text!r}")


if __name__ == "__main__":
    main()
