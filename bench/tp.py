"""Tensor parallelism on this machine: decode throughput of ``Engine(tp_size=2)`` against
one process, and rank 0's time inside the model group's collectives per step.

The default model (SmolLM2-135M: 9 attention heads, 3 KV heads) does not split over two
ranks, so by default the script builds a random Llama with its sizes but 8 attention
heads of 72 and 4 KV heads (same hidden size 576, MLP 1536, 30 layers, vocabulary
49,152), saved to a temporary directory; ``--model DIR`` runs a checkpoint instead.

Each batch size runs ``--repeats`` times per engine (best kept): ``B`` requests of a
64-token random prompt, ``--tokens`` new tokens each, EOS ignored. Figures: output
tokens/s, and rank 0's all-reduce + gather time per forward step (its own transfer time
plus the wait for the slower rank). The TP=1 engine runs first: a TP engine shares the
cores between its ranks (``torch.set_num_threads(cores / N)`` in each process).

    .venv/bin/python bench/tp.py [--batch 1,8] [--tokens 32] [--repeats 2] [--model DIR] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import add_threads_arg, machine, save, set_threads  # noqa: E402


def random_model(out: Path) -> Path:
    import json

    import torch
    import transformers

    from furca.runtime.pull import resolve_model_path

    base = resolve_model_path(None)
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(num_attention_heads=8, num_key_value_heads=4, head_dim=72)
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def run(model: Path, tp: int, batches: list[int], tokens: int, repeats: int) -> dict:
    import torch

    from furca.runtime.engine import Engine

    gen = torch.Generator().manual_seed(1)
    out = {}
    with Engine(model, tp_size=tp, max_total_tokens=8192, decode_log_interval=0, log_capacity=False) as engine:
        for b in batches:
            prompts = [torch.randint(100, 40000, (64,), generator=gen).tolist() for _ in range(b)]
            params = {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 0}
            engine.generate(input_ids=prompts, sampling_params={**params, "max_new_tokens": 2})  # warm-up
            best = None
            for _ in range(repeats):
                engine.flush_cache()
                before = engine.get_server_info()
                began = time.perf_counter()
                engine.generate(input_ids=prompts, sampling_params=params)
                wall = time.perf_counter() - began
                after = engine.get_server_info()
                steps = after["stats"]["steps"] - before["stats"]["steps"]
                comm = 0.0
                if tp > 1:
                    comm = after["tensor_parallel"]["collective_seconds"] - before["tensor_parallel"]["collective_seconds"]
                row = {"tokens_per_s": b * tokens / wall, "wall_s": wall, "steps": steps,
                       "comm_ms_per_step": 1000 * comm / steps, "step_ms": 1000 * wall / steps}
                if best is None or row["tokens_per_s"] > best["tokens_per_s"]:
                    best = row
            out[b] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    add_threads_arg(ap)  # the TP=1 engine's; each TP=2 rank uses cores / 2
    args = ap.parse_args()
    set_threads(args)
    batches = [int(b) for b in args.batch.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or random_model(Path(tmp) / "llama-8h")
        results = {tp: run(model, tp, batches, args.tokens, args.repeats) for tp in (1, 2)}
    m = machine()
    print(f"{m['cpu']}, {m['cores']} cores, load {m['loadavg_1m']} (1 min)")
    print("| batch | TP | tokens/s | step ms | collectives ms/step | TP=2 / TP=1 |")
    print("|---|---|---|---|---|---|")
    for b in batches:
        for tp in (1, 2):
            r = results[tp][b]
            ratio = f"{results[2][b]['tokens_per_s'] / results[1][b]['tokens_per_s']:.2f}x" if tp == 2 else ""
            print(f"| {b} | {tp} | {r['tokens_per_s']:.1f} | {r['step_ms']:.1f} | {r['comm_ms_per_step']:.2f} | {ratio} |")
    print("raw:", save("tp", {"model": str(args.model or "random 8-head SmolLM2-sized Llama"), "tokens": args.tokens,
                              "tp1_threads": args.threads,
                              "results": {str(tp): {str(b): r for b, r in v.items()} for tp, v in results.items()}}))


if __name__ == "__main__":
    main()
