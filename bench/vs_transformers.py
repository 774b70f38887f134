"""furca vs transformers on the default model, greedy, the same torch threads.

1. Batch-1 decode: the same prompt, N greedy tokens (EOS ignored); tokens/s of
   furca's Engine vs `model.generate` (target: >= 1.0x).
2. Mixed workload: 32 requests, prompt lengths 20-500 and output lengths 8-256 from
   a fixed seeded draw. furca gets them all at once (continuous batching, each with
   its own length); transformers runs them as a user would: one left-padded
   `generate` over all 32 with the longest requested length. Output tokens/s counts
   the requested tokens only (target: >= 2x).

    .venv/bin/python bench/vs_transformers.py [--decode-tokens 128] [--skip-mixed] [--threads N]
                                              [--furca auto,float32]

transformers runs in fp32, in a process of its own (spawned), so each side has the only
OpenMP thread pool of its process: libgomp keeps one pool per thread that opened a
parallel region, and two pools in one process (transformers' in the main thread,
furca's in its scheduler thread) throttle each other on a machine with few cores
(``docs/runtime.md``, "One OpenMP pool"). furca runs once per ``--furca`` setting:
``auto`` is the default engine (on a CPU with native bf16, bf16 linear projections in
an fp32 model), ``float32`` is all-fp32, the same arithmetic as transformers.

Each side is timed by the wall clock and by the process CPU clock (all threads); on a
machine shared with other jobs the CPU-time ratio is the steadier figure. Batch-1 runs
keep the best of `--repeats`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import random
import time

import torch
from _util import add_threads_arg, save, set_threads

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


def hf_side(model_path: str, threads: int | None, prompt_ids: list[int], n: int, repeats: int,
            reqs: list | None, pad: int) -> dict:
    """transformers' figures, in the spawned process: best batch-1 (wall, cpu) and mixed (wall, cpu)."""
    from transformers import AutoModelForCausalLM

    if threads:
        torch.set_num_threads(threads)
    hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    hf_generate(hf, [prompt_ids], 4, pad)
    runs = [timed(lambda: hf_generate(hf, [prompt_ids], n, pad)) for _ in range(repeats)]
    out = {"b1": (min(c.wall for c in runs), min(c.cpu for c in runs))}
    if reqs is not None:
        c = timed(lambda: hf_generate(hf, [p for p, _ in reqs], max(o for _, o in reqs), pad))
        out["mixed"] = (c.wall, c.cpu)
    return out


def furca_side(setting: str, prompt_ids: list[int], n: int, repeats: int, reqs: list | None) -> dict:
    kwargs = {} if setting == "auto" else {"dtype": setting}
    with Engine(model=None, **kwargs) as engine:
        model = engine.loaded.model
        params = {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}

        def b1():
            engine.flush_cache()  # no radix hit: the prompt is computed every time, as in HF
            engine.generate(input_ids=prompt_ids, sampling_params=params)

        engine.generate(input_ids=prompt_ids, sampling_params={**params, "max_new_tokens": 4})
        runs = [timed(b1) for _ in range(repeats)]
        out = {"b1": (min(c.wall for c in runs), min(c.cpu for c in runs)),
               "dtypes": f"{str(model.dtype)[6:]} / linear {str(model.linear_dtype)[6:]}"}
        if reqs is not None:
            engine.flush_cache()
            c = timed(lambda: engine.generate(
                input_ids=[p for p, _ in reqs],
                sampling_params=[{"max_new_tokens": o, "temperature": 0.0, "ignore_eos": True} for _, o in reqs]))
            out["mixed"] = (c.wall, c.cpu)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-mixed", action="store_true")
    ap.add_argument("--furca", default="auto,float32",
                    help="comma-separated furca settings: auto (the default engine) and/or a dtype")
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    from furca.runtime.pull import pull_default_model
    from furca.runtime.tokenizer import Tokenizer

    model_path = str(pull_default_model(progress=False))
    tok = Tokenizer.from_pretrained(model_path)  # for the prompts; each side loads its own model
    pad = tok.eos_token_ids[0]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
                                     add_generation_prompt=True)
    prompt_ids = tok.encode(prompt, add_special_tokens=True)
    n = args.decode_tokens
    reqs = None if args.skip_mixed else draw_workload(tok.vocab_size, tok.special_token_ids)

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        hf = pool.submit(hf_side, model_path, args.threads, prompt_ids, n, args.repeats, reqs, pad).result()
    (hw, hc) = hf["b1"]
    print(f"transformers fp32: batch 1 {n / hw:6.1f} tok/s" +
          (f", mixed {hf['mixed'][0]:.1f} s" if reqs else ""))
    for setting in args.furca.split(","):
        f = furca_side(setting, prompt_ids, n, args.repeats, reqs)
        (fw, fc) = f["b1"]
        print(f"furca {setting} ({f['dtypes']}): batch-1 decode, {len(prompt_ids)}-token prompt + {n} tokens: "
              f"{n / fw:6.1f} tok/s vs {n / hw:6.1f} -> {hw / fw:.2f}x wall, {hc / fc:.2f}x CPU time (target >= 1.0x)")
        record = dict(bench="vs_transformers", furca=setting, furca_dtypes=f["dtypes"], hf_process="spawned",
                      decode_tokens=n, prompt_tokens=len(prompt_ids),
                      b1_furca_tok_s=round(n / fw, 2), b1_hf_tok_s=round(n / hw, 2), b1_ratio=round(hw / fw, 3),
                      b1_cpu_ratio=round(hc / fc, 3))
        if reqs is not None:
            wanted = sum(o for _, o in reqs)
            (f2w, f2c), (h2w, h2c) = f["mixed"], hf["mixed"]
            print(f"  32 mixed requests ({sum(len(p) for p, _ in reqs)} prompt tokens, {wanted} requested output "
                  f"tokens): furca {wanted / f2w:6.1f} tok/s ({f2w:.1f} s), transformers {wanted / h2w:6.1f} tok/s "
                  f"({h2w:.1f} s) -> {h2w / f2w:.2f}x wall, {h2c / f2c:.2f}x CPU time (target >= 2x)")
            record.update(mixed_requested_tokens=wanted, mixed_furca_tok_s=round(wanted / f2w, 2),
                          mixed_hf_tok_s=round(wanted / h2w, 2), mixed_ratio=round(h2w / f2w, 3),
                          mixed_cpu_ratio=round(h2c / f2c, 3), mixed_furca_s=round(f2w, 2),
                          mixed_hf_s=round(h2w, 2))
        print(f"appended to {save('vs_transformers', record)}")


if __name__ == "__main__":
    main()
