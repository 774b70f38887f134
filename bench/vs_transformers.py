"""furca vs transformers on the default model, fp32, same process, same torch threads.

1. Batch-1 decode: the same prompt, N greedy tokens (EOS ignored); tokens/s of
   furca's Engine vs `model.generate` (target: >= 1.0x).
2. Mixed workload: 32 requests, prompt lengths 20-500 and output lengths 8-256 from
   a fixed seeded draw. furca gets them all at once (continuous batching, each with
   its own length); transformers runs them as a user would: one left-padded
   `generate` over all 32 with the longest requested length. Output tokens/s counts
   the requested tokens only (target: >= 2x).

    .venv/bin/python bench/vs_transformers.py [--decode-tokens 128] [--skip-mixed] [--threads N]

Each side is timed by the wall clock and by the process CPU clock (all threads); on a
machine shared with other jobs the CPU-time ratio is the steadier figure. Batch-1 runs
alternate between the two sides and keep the best of `--repeats`.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from _util import add_threads_arg, save, set_threads
from transformers import AutoModelForCausalLM

from furca.runtime.engine import Engine


def draw_workload(vocab: int, special: set[int], n: int = 32, seed: int = 0):
    rng = random.Random(seed)
    ids = [i for i in range(vocab) if i not in special]
    reqs = []
    for _ in range(n):
        plen, olen = rng.randint(20, 500), rng.randint(8, 256)
        reqs.append(([rng.choice(ids) for _ in range(plen)], olen))
    return reqs


class Clock:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


@torch.inference_mode()
def hf_generate(model, batch_ids: list[list[int]], new_tokens: int, pad_id: int) -> None:
    width = max(len(x) for x in batch_ids)
    input_ids = torch.full((len(batch_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, x in enumerate(batch_ids):
        input_ids[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad_id)


def timed(fn) -> Clock:
    with Clock() as c:
        fn()
    return c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-mixed", action="store_true")
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    with Engine(model=None, dtype="float32") as engine:
        tok = engine.tokenizer
        hf = AutoModelForCausalLM.from_pretrained(engine.model_path, dtype=torch.float32).eval()
        pad = tok.eos_token_ids[0]
        prompt = tok.apply_chat_template([{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
                                         add_generation_prompt=True)
        prompt_ids = tok.encode(prompt, add_special_tokens=True)
        n = args.decode_tokens
        params = {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}

        def furca_b1():
            engine.flush_cache()  # no radix hit: the prompt is computed every time, as in HF
            engine.generate(input_ids=prompt_ids, sampling_params=params)

        # --- 1. batch-1 decode (prompt prefill included on both sides)
        hf_generate(hf, [prompt_ids], 4, pad)
        engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": 4})
        runs = {"furca": [], "hf": []}
        for _ in range(args.repeats):
            runs["hf"].append(timed(lambda: hf_generate(hf, [prompt_ids], n, pad)))
            runs["furca"].append(timed(furca_b1))
        best = {k: (min(c.wall for c in v), min(c.cpu for c in v)) for k, v in runs.items()}
        (fw, fc), (hw, hc) = best["furca"], best["hf"]
        print(f"batch-1 decode, {len(prompt_ids)}-token prompt + {n} tokens: furca {n / fw:6.1f} tok/s, "
              f"transformers {n / hw:6.1f} tok/s -> {hw / fw:.2f}x wall, {hc / fc:.2f}x CPU time (target >= 1.0x)")
        record = dict(bench="vs_transformers", decode_tokens=n, prompt_tokens=len(prompt_ids),
                      b1_furca_tok_s=round(n / fw, 2), b1_hf_tok_s=round(n / hw, 2), b1_ratio=round(hw / fw, 3),
                      b1_cpu_ratio=round(hc / fc, 3))

        # --- 2. mixed workload
        if not args.skip_mixed:
            reqs = draw_workload(tok.vocab_size, tok.special_token_ids)
            wanted = sum(o for _, o in reqs)
            engine.flush_cache()
            f2 = timed(lambda: engine.generate(
                input_ids=[p for p, _ in reqs],
                sampling_params=[{"max_new_tokens": o, "temperature": 0.0, "ignore_eos": True} for _, o in reqs]))
            h2 = timed(lambda: hf_generate(hf, [p for p, _ in reqs], max(o for _, o in reqs), pad))
            print(f"32 mixed requests ({sum(len(p) for p, _ in reqs)} prompt tokens, {wanted} requested output "
                  f"tokens): furca {wanted / f2.wall:6.1f} tok/s ({f2.wall:.1f} s), transformers "
                  f"{wanted / h2.wall:6.1f} tok/s ({h2.wall:.1f} s) -> {h2.wall / f2.wall:.2f}x wall, "
                  f"{h2.cpu / f2.cpu:.2f}x CPU time (target >= 2x)")
            record.update(mixed_requested_tokens=wanted, mixed_furca_tok_s=round(wanted / f2.wall, 2),
                          mixed_hf_tok_s=round(wanted / h2.wall, 2), mixed_ratio=round(h2.wall / f2.wall, 3),
                          mixed_cpu_ratio=round(h2.cpu / f2.cpu, 3), mixed_furca_s=round(f2.wall, 2),
                          mixed_hf_s=round(h2.wall, 2))
    print(f"appended to {save('vs_transformers', record)}")


if __name__ == "__main__":
    main()
