"""The Q8_0 LM head on torch's OpenMP team vs on furca's thread pool, in one process.

    .venv/bin/python bench/omp_team.py [--threads 2] [--rounds 4] [--tokens 48]

The default model's own GGUF file (Q4_1 projections, Q8_0 tied embedding / LM head) is
loaded once with ``quantization="auto"``; batch-1 greedy decode (EOS ignored) is timed in
alternating rounds with ``furca.runtime.omp_team`` on (the head's rows split among
torch's OpenMP threads by ``GOMP_parallel``) and off (the same kernel on the calling
thread and a Python thread pool, which shares the cores with torch's spinning OpenMP
workers). Each round times ``--tokens`` new tokens after the same prompt, minus an 8-token
run (prompt and first step cancel); the median ms per token of each mode is printed with
the 1-minute load average. A micro part times the head alone right after 30 int4
projection calls, as a decode step has them.
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
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from furca import Engine
    from furca.runtime import omp_team

    assert omp_team.available(), "torch's OpenMP team is not reachable here"
    resolved = omp_team._gomp_parallel()

    def mode(on: bool) -> None:
        omp_team._STATE[0] = resolved if on else None

    eng = Engine(str(GGUF), quantization="auto")
    prompt = "Write a long story about a lighthouse keeper."

    def run(n: int) -> float:
        t = time.perf_counter()
        eng.generate(prompt, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        return time.perf_counter() - t

    ms = {True: [], False: []}
    for on in (True, False):  # warm-up both
        mode(on)
        run(8)
    for _ in range(args.rounds):
        for on in (True, False):
            mode(on)
            ms[on].append(1e3 * (run(args.tokens) - run(8)) / (args.tokens - 8))
    eng.shutdown()
    load = os.getloadavg()[0]
    for on in (True, False):
        print(f"decode, head {'on the OpenMP team' if on else 'on the thread pool'}: "
              f"{statistics.median(ms[on]):.2f} ms/token (rounds {', '.join(f'{v:.2f}' for v in ms[on])})")
    print(f"load {load:.2f}, threads {args.threads}")


if __name__ == "__main__":
    main()
