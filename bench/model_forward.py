"""The model forward alone: furca's `LlamaForCausalLM` over its KV pool vs transformers'
model with a `DynamicCache`, on the same weights (default model, fp32), same process.

Three shapes, each timed as the best of repeated, alternating runs (`torch.inference_mode()`):

- batch-1 decode: one new token after a ~`--context`-token prompt, `--steps` steps;
- 32-row decode: 32 requests with contexts 20-500 (seeded draw), one token each;
  transformers gets them left-padded (its attention mask covers the padding);
- prefill of `--prefill` tokens (batch 1).

No scheduler, no sampling: this isolates model + attention backend cost.

    .venv/bin/python bench/model_forward.py [--steps 64] [--context 100] [--prefill 500]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from _util import save
from transformers import AutoModelForCausalLM, DynamicCache

from furca.runtime.attention.torch_backend import TorchAttentionBackend
from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.kv_cache import KVCache
from furca.runtime.loader import load_model


class Furca:
    """Drives the furca model by hand: each request owns a contiguous slot range."""

    def __init__(self, model, config, num_slots: int):
        self.model = model
        self.cache = KVCache(num_slots, config.num_hidden_layers, config.num_key_value_heads, config.head_dim,
                             torch.float32)
        self.backend = TorchAttentionBackend()

    def forward(self, prefix_lens: list[int], new_ids: list[list[int]], bases: list[int]) -> torch.Tensor:
        kv, out, ids, pos, logit_rows, row = [], [], [], [], [], 0
        for p, n_ids, base in zip(prefix_lens, new_ids, bases):
            n = len(n_ids)
            kv.append(torch.arange(base, base + p + n))
            out.append(torch.arange(base + p, base + p + n))
            ids += n_ids
            pos += range(p, p + n)
            row += n
            logit_rows.append(row - 1)
        batch = ForwardBatch.build(prefix_lens=prefix_lens, qo_lens=[len(x) for x in new_ids],
                                   kv_indices=torch.cat(kv), out_cache_loc=torch.cat(out),
                                   logits_indices=torch.tensor(logit_rows), kv_cache=self.cache,
                                   attn_backend=self.backend)
        return self.model(torch.tensor(ids), torch.tensor(pos), batch)


CLOCK = time.perf_counter


def timed_pair(fa, fb, repeats: int) -> tuple[float, float]:
    """Best-of-`repeats` seconds of `fa` and `fb`, run alternately (a shared machine's
    load then hits both alike)."""
    fa(), fb()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((fa, ta), (fb, tb)):
            t0 = CLOCK()
            fn()
            times.append(CLOCK() - t0)
    return min(ta), min(tb)


@torch.inference_mode()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--context", type=int, default=100)
    ap.add_argument("--prefill", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=["b1", "b32", "prefill"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with this thread's CPU clock (with --threads 1: robust on a busy machine)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
    loaded = load_model(None, dtype="float32")
    cfg = loaded.config
    hf = AutoModelForCausalLM.from_pretrained(loaded.model_path, dtype=torch.float32).eval()
    rng = random.Random(0)
    vocab = cfg.vocab_size
    furca = Furca(loaded.model, cfg, 40_000)
    record = {"bench": "model_forward", "steps": args.steps, "context": args.context}

    # ---- batch-1 decode
    if args.only in (None, "b1"):
        prompt = [rng.randrange(3, vocab) for _ in range(args.context)]

        def furca_b1():
            furca.forward([0], [prompt], [1])
            tok = 5
            for s in range(args.steps):
                furca.forward([args.context + s], [[tok]], [1])

        def hf_b1():
            cache = DynamicCache()
            hf(input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True, logits_to_keep=1)
            for s in range(args.steps):
                hf(input_ids=torch.tensor([[5]]), past_key_values=cache, use_cache=True)

        t_prefill_f, t_prefill_h = timed_pair(
            lambda: furca.forward([0], [prompt], [1]),
            lambda: hf(input_ids=torch.tensor([prompt]), past_key_values=DynamicCache(), use_cache=True,
                       logits_to_keep=1), args.repeats)
        f, h = timed_pair(furca_b1, hf_b1, args.repeats)
        f, h = (f - t_prefill_f) / args.steps, (h - t_prefill_h) / args.steps
        print(f"b1 decode step: furca {f * 1e3:6.2f} ms  hf {h * 1e3:6.2f} ms  (hf/furca {h / f:.2f}x)")
        record.update(b1_furca_ms=round(f * 1e3, 3), b1_hf_ms=round(h * 1e3, 3))

    # ---- 32-row decode
    if args.only in (None, "b32"):
        lens = [rng.randint(20, 500) for _ in range(32)]
        prompts = [[rng.randrange(3, vocab) for _ in range(n)] for n in lens]
        bases = [1 + i * 1000 for i in range(32)]
        for p, b in zip(prompts, bases):
            furca.forward([0], [p], [b])
        width = max(lens)
        ids = torch.full((32, width), 0)
        mask = torch.zeros(32, width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        hf_cache = DynamicCache()
        hf(input_ids=ids, attention_mask=mask, past_key_values=hf_cache, use_cache=True, logits_to_keep=1)
        steps = 8

        def furca_b32():
            for s in range(steps):
                furca.forward([n + s for n in lens], [[5]] * 32, bases)

        def hf_b32():
            cache = DynamicCache()
            for layer_id in range(len(hf_cache.layers)):
                cache.update(hf_cache.layers[layer_id].keys.clone(), hf_cache.layers[layer_id].values.clone(),
                             layer_id)
            m = mask
            for s in range(steps):
                m = torch.cat([m, torch.ones(32, 1, dtype=m.dtype)], 1)
                hf(input_ids=torch.full((32, 1), 5), attention_mask=m, past_key_values=cache, use_cache=True)

        f, h = timed_pair(furca_b32, hf_b32, args.repeats)
        f, h = f / steps, h / steps
        print(f"b32 decode step: furca {f * 1e3:6.2f} ms  hf {h * 1e3:6.2f} ms  (hf/furca {h / f:.2f}x)")
        record.update(b32_furca_ms=round(f * 1e3, 3), b32_hf_ms=round(h * 1e3, 3))

    # ---- prefill
    if args.only in (None, "prefill"):
        prompt = [rng.randrange(3, vocab) for _ in range(args.prefill)]
        f, h = timed_pair(lambda: furca.forward([0], [prompt], [1]),
                          lambda: hf(input_ids=torch.tensor([prompt]), past_key_values=DynamicCache(),
                                     use_cache=True, logits_to_keep=1), args.repeats)
        print(f"prefill {args.prefill}: furca {f * 1e3:6.1f} ms  hf {h * 1e3:6.1f} ms  (hf/furca {h / f:.2f}x)")
        record.update(prefill_tokens=args.prefill, prefill_furca_ms=round(f * 1e3, 2),
                      prefill_hf_ms=round(h * 1e3, 2))
    if args.only is None:
        print(f"appended to {save('model_forward', record)}")


if __name__ == "__main__":
    main()
