"""furca vs transformers on the default model, fp32, same process, same torch threads.

1. Batch-1 decode: the same prompt, N greedy tokens (EOS ignored); tokens/s of
   furca's Engine vs `model.generate` (target: >= 1.0x).
2. Mixed workload: 32 requests, prompt lengths 20-500 and output lengths 8-256 from
   a fixed seeded draw. furca gets them all at once (continuous batching, each with
   its own length); transformers runs them as a user would: one left-padded
   `generate` over all 32 with the longest requested length. Output tokens/s counts
   the requested tokens only (target: >= 2x).

    .venv/bin/python bench/vs_transformers.py [--decode-tokens 128] [--skip-mixed]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from _util import save
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


@torch.inference_mode()
def hf_generate(model, batch_ids: list[list[int]], new_tokens: int, pad_id: int) -> float:
    width = max(len(x) for x in batch_ids)
    input_ids = torch.full((len(batch_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, x in enumerate(batch_ids):
        input_ids[i, width - len(x):] = torch.tensor(x)
        mask[i, width - len(x):] = 1
    t0 = time.perf_counter()
    model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad_id)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--skip-mixed", action="store_true")
    args = ap.parse_args()

    with Engine(model=None, dtype="float32") as engine:
        tok = engine.tokenizer
        path = engine.model_path
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        pad = tok.eos_token_ids[0]
        prompt = tok.apply_chat_template([{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
                                         add_generation_prompt=True)
        prompt_ids = tok.encode(prompt, add_special_tokens=True)
        n = args.decode_tokens
        params = {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}

        # --- 1. batch-1 decode
        hf_generate(hf, [prompt_ids], 4, pad)
        engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": 4})
        hf_s = min(hf_generate(hf, [prompt_ids], n, pad) for _ in range(2))
        furca_s = []
        for _ in range(2):
            engine.flush_cache()
            t0 = time.perf_counter()
            engine.generate(input_ids=prompt_ids, sampling_params=params)
            furca_s.append(time.perf_counter() - t0)
        fs = min(furca_s)
        r1 = hf_s / fs
        print(f"batch-1 decode, {n} tokens: furca {n / fs:7.1f} tok/s, transformers {n / hf_s:7.1f} tok/s "
              f"-> {r1:.2f}x (target >= 1.0x)")
        record = dict(bench="vs_transformers", decode_tokens=n, b1_furca_tok_s=round(n / fs, 1),
                      b1_hf_tok_s=round(n / hf_s, 1), b1_ratio=round(r1, 2))

        # --- 2. mixed workload
        if not args.skip_mixed:
            reqs = draw_workload(tok.vocab_size, tok.special_token_ids)
            wanted = sum(o for _, o in reqs)
            engine.flush_cache()
            t0 = time.perf_counter()
            engine.generate(input_ids=[p for p, _ in reqs],
                            sampling_params=[{"max_new_tokens": o, "temperature": 0.0, "ignore_eos": True}
                                             for _, o in reqs])
            f2 = time.perf_counter() - t0
            h2 = hf_generate(hf, [p for p, _ in reqs], max(o for _, o in reqs), pad)
            r2 = h2 / f2
            print(f"32 mixed requests ({wanted} requested output tokens): furca {wanted / f2:7.1f} tok/s, "
                  f"transformers {wanted / h2:7.1f} tok/s -> {r2:.2f}x (target >= 2x)")
            record.update(mixed_requested_tokens=wanted, mixed_furca_tok_s=round(wanted / f2, 1),
                          mixed_hf_tok_s=round(wanted / h2, 1), mixed_ratio=round(r2, 2))
    print(f"appended to {save('vs_transformers', record)}")


if __name__ == "__main__":
    main()
