"""Batch-1 decode of the default model's Q4_1 GGUF with the compiled CPU step
(`furca.runtime.models.cpu_step`: every layer in one call on torch's OpenMP team) against
the per-op path, one engine, alternating in one process.

    .venv/bin/python bench/cpu_step.py [--threads 2] [--rounds 5] [--tokens 48]

The engine loads ``SmolLM2-135M-Instruct.Q4_1.gguf`` with ``quantization="auto"``,
``packed.INT4_DOT`` on (Q4_1 -> Int4Dot, Q8_0 -> GroupInt8) and fp32 activations and
projections (the step's case). Each round times ``--tokens`` greedy tokens (EOS ignored)
after the same prompt minus an 8-token run (prompt and first step cancel), once with the
model's ``cpu_step`` and once with it set aside (the per-op layers), in alternating order.
Per path: median and best wall ms per token, the process CPU ms per token (all threads:
team threads spin at barriers and between ops, so this is ~threads x wall when nothing
else runs; on a loaded machine, wall swings with the other processes and CPU time less),
and for the compiled path the ms per token inside the step's one call (the layers: wall,
and the calling thread's CPU time, which on one thread is the whole team's and does not
grow with the machine's load) and the rest (embedding, final norm, LM head, sampling,
scheduler).

The floor: the bytes a step reads (the layers' packed weights, and the Q8_0 head) over the
pure-read bandwidth of a large tensor sum (`bandwidth_floor.read_bandwidth`) on the same
threads. The 1-minute load average is printed beside the figures; one JSON line goes to
``bench/results/raw/cpu_step.jsonl``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

GGUF = Path("~/.cache/furca/gguf/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
PROMPT = "Write a long story about a lighthouse keeper."


def main() -> None:
    ap = argparse.ArgumentParser(description="compiled CPU step vs per-op decode, default Q4_1 GGUF")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the team's size)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of both paths")
    ap.add_argument("--tokens", type=int, default=48, help="greedy tokens a timed run (minus an 8-token run)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from _util import save
    from bandwidth_floor import read_bandwidth

    from furca import Engine
    from furca.runtime.quant import packed
    from furca.runtime.quant.linear import QuantLinear

    packed.INT4_DOT = True
    engine = Engine(str(GGUF), quantization="auto", dtype="float32", linear_dtype="float32")
    model = engine.scheduler.runner.model
    step = model.cpu_step
    if step is None:
        raise SystemExit("the compiled step does not apply to this model here (see cpu_step's docstring)")
    inside = [0.0, 0.0]  # wall, calling thread's CPU
    run = step.run

    def timed(*a):
        t, c = time.perf_counter(), time.thread_time()
        out = run(*a)
        inside[0] += time.perf_counter() - t
        inside[1] += time.thread_time() - c
        return out

    step.run = timed

    def gen(n: int) -> tuple[float, float, float, float, str]:
        inside[:] = 0.0, 0.0
        w, c = time.perf_counter(), time.process_time()
        out = engine.generate(PROMPT, sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        return time.perf_counter() - w, time.process_time() - c, inside[0], inside[1], out["text"]

    def per_token(use_step: bool) -> tuple[float, float, float, float, str]:
        model.cpu_step = step if use_step else None
        long, short = gen(args.tokens), gen(8)
        k = 1e3 / (args.tokens - 8)
        return (*((long[i] - short[i]) * k for i in range(4)), long[4])

    texts = {name: per_token(on)[4] for name, on in (("step", True), ("per-op", False))}  # warm-up
    rows: dict[str, list] = {"step": [], "per-op": []}
    for r in range(args.rounds):
        order = (("step", True), ("per-op", False)) if r % 2 == 0 else (("per-op", False), ("step", True))
        for name, on in order:
            rows[name].append(per_token(on)[:4])
    load = os.getloadavg()[0]
    engine.shutdown()

    layer_bytes = sum(m.weight_nbytes for m in model.modules() if isinstance(m, QuantLinear))
    head_bytes = model.model.embed_tokens.weight_nbytes
    bw = read_bandwidth()
    floor = {"layers": 1e3 * layer_bytes / bw, "head": 1e3 * head_bytes / bw}
    summary = {}
    for name, v in rows.items():
        wall, cpu, layers, layers_cpu = (statistics.median(x[i] for x in v) for i in range(4))
        summary[name] = {"ms_per_token": wall, "best": min(x[0] for x in v), "cpu_ms_per_token": cpu,
                         "rounds": [round(x[0], 2) for x in v]}
        line = f"{name}: median {wall:.2f} ms/token (best {summary[name]['best']:.2f}), CPU {cpu:.2f} ms/token"
        if name == "step":
            summary[name].update(layers_ms=layers, layers_thread_cpu_ms=layers_cpu)
            line += (f"; inside the step's call {layers:.2f} ms (calling thread's CPU {layers_cpu:.2f}), "
                     f"the rest {wall - layers:.2f} ms")
        print(line + f" (rounds {', '.join(f'{x[0]:.2f}' for x in v)})")
    print(f"floor at {bw / 1e9:.1f} GB/s read: layers {layer_bytes / 1e6:.1f} MB -> {floor['layers']:.2f} ms, "
          f"head {head_bytes / 1e6:.1f} MB -> {floor['head']:.2f} ms")
    print(f"load {load:.2f}, threads {args.threads}")
    same = texts["step"] == texts["per-op"]
    print(f"greedy texts {'equal' if same else 'DIFFER'}: {texts['step'][:80]!r}")
    save("cpu_step", {"threads": args.threads, "tokens": args.tokens, "load": load, "read_gb_s": bw / 1e9,
                      "floor_ms": floor, "texts_equal": same, **summary})


if __name__ == "__main__":
    main()
