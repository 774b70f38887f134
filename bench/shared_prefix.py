"""Shared-prefix workload: radix cache on vs off, in one process.

64 requests submitted together share a ~1,000-token few-shot prefix and ask for 8
new tokens each (greedy). We time the whole batch with the radix cache on and off
on the same engine configuration and report the throughput ratio, and the cached
tokens against the optimum (every copy of the prefix but the first).

    .venv/bin/python bench/shared_prefix.py [--requests 64] [--prefix-tokens 1000] [--threads N]

Timed by the wall clock and the process CPU clock (steadier on a shared machine).

Targets: ratio >= 5x; cached tokens >= 95% of the optimum.
"""

from __future__ import annotations

import argparse
import time

from _util import add_threads_arg, few_shot_prefix, save, set_threads

from furca.runtime.engine import Engine


def run(engine: Engine, prompts: list[str], new_tokens: int) -> tuple[float, float, list]:
    params = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}
    engine.flush_cache()
    t0, c0 = time.perf_counter(), time.process_time()
    outs = engine.generate(prompts, sampling_params=params)
    return time.perf_counter() - t0, time.process_time() - c0, outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prefix-tokens", type=int, default=1000)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--model", default=None)
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    results = {}
    for cache_on in (True, False):
        with Engine(model=args.model, disable_radix_cache=not cache_on) as engine:
            tok = engine.tokenizer
            prefix = few_shot_prefix(tok, args.prefix_tokens)
            prompts = [prefix + f"Q: What is {i} plus {2 * i + 1}? A:" for i in range(args.requests)]
            run(engine, prompts[:2], 2)  # warm-up
            secs, cpu, outs = run(engine, prompts, args.new_tokens)
            prefix_len = len(tok.encode(prefix))
            cached = sum(o.meta_info["cached_tokens"] for o in outs)
            out_tokens = sum(o.meta_info["completion_tokens"] for o in outs)
            results[cache_on] = dict(secs=secs, cpu=cpu, cached=cached, out_tokens=out_tokens, prefix_len=prefix_len,
                                     texts=[o.text for o in outs])
            print(f"radix cache {'on ' if cache_on else 'off'}: {secs:7.2f} s ({cpu:7.2f} s CPU), "
                  f"{out_tokens / secs:8.1f} output tok/s, cached tokens {cached}")

    on, off = results[True], results[False]
    optimum = (args.requests - 1) * on["prefix_len"]
    ratio = off["secs"] / on["secs"]
    hit = on["cached"] / optimum
    same = sum(a == b for a, b in zip(on["texts"], off["texts"]))
    cpu_ratio = off["cpu"] / on["cpu"]
    print(f"throughput ratio (cache on / off): {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU time   (target >= 5x)")
    print(f"cached tokens: {on['cached']} of optimum {optimum} = {hit:.1%}   (target >= 95%)")
    print(f"identical greedy outputs on vs off: {same}/{args.requests}")
    path = save("shared_prefix", dict(requests=args.requests, prefix_tokens=on["prefix_len"],
                                      new_tokens=args.new_tokens, secs_on=round(on["secs"], 3),
                                      secs_off=round(off["secs"], 3), ratio=round(ratio, 2),
                                      cpu_ratio=round(cpu_ratio, 2),
                                      cached=on["cached"], optimum=optimum, hit_of_optimum=round(hit, 4),
                                      identical_outputs=same))
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
