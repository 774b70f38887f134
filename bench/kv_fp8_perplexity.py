"""Perplexity of the default model with a float32, a bfloat16 and an fp8 (e4m3) KV pool.

    .venv/bin/python bench/kv_fp8_perplexity.py [--tokens 768]

One window of ``--tokens`` tokens of bench/data/alice_ch1-3.txt (from character 3000),
scored by the engine's prompt logprobs (``logprob_start_len=1``) with each
``kv_cache_dtype``; the weights and everything else are the default engine's. Prints
one line per pool: tokens scored and perplexity. Accuracy only: no timing.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from furca.runtime.engine import Engine

TEXT = Path(__file__).parent / "data" / "alice_ch1-3.txt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=768)
    args = ap.parse_args()
    text = TEXT.read_text()[3000:]
    for kv in ("float32", "bfloat16", "fp8_e4m3"):
        with Engine(kv_cache_dtype=kv, max_total_tokens=args.tokens + 64) as engine:
            ids = engine.tokenizer.encode(text)[:args.tokens]
            out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0, "return_logprob": True,
                                                                  "logprob_start_len": 1})
            logprobs = [entry[0] for entry in out.meta_info["input_token_logprobs"]]
            ppl = math.exp(-sum(logprobs) / len(logprobs))
            print(f"kv_cache_dtype={kv:9s} tokens {len(logprobs)}  perplexity {ppl:.3f}", flush=True)


if __name__ == "__main__":
    main()
