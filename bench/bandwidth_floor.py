"""Batch-1 decode step time against the memory-bandwidth floor, default model, fp32.

floor = bytes of weights read per decode step / memory bandwidth, where bandwidth is
measured here by a large tensor copy (bytes read + written per second, same torch
thread count as the decode) and the weights read per step are every parameter once
(the tied embedding is read once, as the LM head; the input embedding lookup reads
one row). A pure-read bandwidth (a sum) is reported beside it: a decode step mostly
reads. Reports step time / floor, for the engine's step (scheduler, sampling and
detokenization included: (time of N tokens - time of 1 token) / (N - 1)) and for the
model forward alone.

    .venv/bin/python bench/bandwidth_floor.py [--tokens 128] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
from _util import add_threads_arg, save, set_threads

from furca.runtime.engine import Engine


def copy_bandwidth(num_bytes: int = 512 << 20, repeats: int = 5) -> float:
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * num_bytes / best  # read + write


def read_bandwidth(num_bytes: int = 512 << 20, repeats: int = 5) -> float:
    """Bytes per second of a pure read (a sum), the traffic pattern of a decode step."""
    src = torch.ones(num_bytes // 4, dtype=torch.float32)
    src.sum()
    return num_bytes / best_of(src.sum, repeats)


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)
    with Engine(model=None, dtype="float32") as engine:
        model = engine.loaded.model
        seen, weight_bytes = set(), 0
        for p in model.parameters():
            if p.data_ptr() in seen:
                continue
            seen.add(p.data_ptr())
            weight_bytes += p.numel() * p.element_size()
        prompt_ids = engine.tokenizer.encode("The lighthouse keeper", add_special_tokens=True)
        params = {"max_new_tokens": args.tokens, "temperature": 0.0, "ignore_eos": True}

        def gen(num_tokens: int) -> None:
            engine.flush_cache()
            engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": num_tokens})

        gen(4)
        bw = copy_bandwidth()
        t_one = best_of(lambda: gen(1), args.repeats)
        t_all = best_of(lambda: gen(args.tokens), args.repeats)
        forward_step = model_step_time(engine, prompt_ids, args.repeats)
        bw = max(bw, copy_bandwidth())  # measured before and after, best kept
        read_bw = read_bandwidth()
    step = (t_all - t_one) / (args.tokens - 1)
    floor = weight_bytes / bw
    print(f"copy bandwidth {bw / 1e9:.1f} GB/s; weights {weight_bytes / 1e6:.1f} MB; floor {floor * 1e3:.2f} ms/step "
          f"({torch.get_num_threads()} threads)")
    read_floor = weight_bytes / read_bw
    print(f"read bandwidth {read_bw / 1e9:.1f} GB/s -> read floor {read_floor * 1e3:.2f} ms/step")
    print(f"batch-1 decode step (engine) {step * 1e3:.2f} ms -> {step / floor:.2f}x the bandwidth floor "
          f"({step / read_floor:.2f}x the read floor)")
    print(f"batch-1 decode step (model forward only) {forward_step * 1e3:.2f} ms -> "
          f"{forward_step / floor:.2f}x the bandwidth floor")
    path = save("bandwidth_floor", dict(
        tokens=args.tokens, bandwidth_gb_s=round(bw / 1e9, 2), weight_mb=round(weight_bytes / 1e6, 1),
        floor_ms=round(floor * 1e3, 3), step_ms=round(step * 1e3, 3), ratio=round(step / floor, 2),
        forward_step_ms=round(forward_step * 1e3, 3), forward_ratio=round(forward_step / floor, 2),
        read_bandwidth_gb_s=round(read_bw / 1e9, 2), read_floor_ratio=round(step / read_floor, 2)))
    print(f"appended to {path}")


def model_step_time(engine: Engine, prompt_ids: list[int], repeats: int, steps: int = 32) -> float:
    """Seconds per batch-1 decode forward of the bare model (its own small KV pool)."""
    from furca.runtime.attention.torch_backend import TorchAttentionBackend
    from furca.runtime.forward_batch import ForwardBatch
    from furca.runtime.kv_cache import KVCache

    model, cfg = engine.loaded.model, engine.model_config
    n = len(prompt_ids)
    cache = KVCache(n + steps + 1, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, torch.float32)
    backend = TorchAttentionBackend()

    def forward(prefix_len: int, ids: list[int]) -> None:
        total = prefix_len + len(ids)
        batch = ForwardBatch.build(prefix_lens=[prefix_len], qo_lens=[len(ids)],
                                   kv_indices=torch.arange(1, total + 1),
                                   out_cache_loc=torch.arange(prefix_len + 1, total + 1),
                                   logits_indices=torch.tensor([len(ids) - 1]), kv_cache=cache,
                                   attn_backend=backend)
        model(torch.tensor(ids), torch.arange(prefix_len, total), batch)

    def run() -> None:
        for s in range(steps):
            forward(n + s, [prompt_ids[0]])

    with torch.inference_mode():
        forward(0, prompt_ids)
        return best_of(run, repeats) / steps


if __name__ == "__main__":
    main()
