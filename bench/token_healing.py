"""How often greedy output continues a word that the prompt cuts, with and without
token healing.

    .venv/bin/python bench/token_healing.py [--prompts 60] [--seed 0] [--context 300]

Text: bench/data/alice_ch1-3.txt (public domain; bench/data/SOURCE.md). ``--prompts``
cut positions are drawn at random characters (fixed ``--seed``) from the text, skipping
blank lines; each prompt is the ``--context`` characters before the cut (from a word
start). The target is what the original text has next: the rest of the cut word, or,
when the cut falls between words, the next word with its leading space (and the
punctuation attached to it). An output is correct when it starts with the target.
Greedy, ``max_new_tokens`` 6, EOS ignored, all prompts in one ``generate`` batch per
setting, on ``Engine()`` (the default model). Prints the two rates, how many prompts
healing backed up, and appends a JSON line to bench/results/raw/token_healing.jsonl.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._util import save  # noqa: E402

TEXT = os.path.join(ROOT, "bench", "data", "alice_ch1-3.txt")


def cuts(text: str, n: int, seed: int, context: int) -> list[tuple[str, str]]:
    """``n`` (prompt, target) pairs, cut at random characters of ``text``."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    while len(out) < n:
        cut = rng.randrange(context + 1, len(text) - 40)
        if text[cut - 1] == "\n" or text[cut] == "\n":
            continue
        start = text.rfind(" ", 0, cut - context) + 1
        prompt = text[start:cut]
        if "\n\n" in prompt[-40:]:
            continue
        m = re.match(r"\w+|\s*\S+", text[cut:])  # rest of the word, or the next word
        target = m.group(0) if m else ""
        if target.strip():
            out.append((prompt, target))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--context", type=int, default=300)
    args = ap.parse_args()

    from furca.runtime.engine import Engine
    from furca.runtime.token_healing import healer_for

    with open(TEXT) as f:
        text = f.read()
    pairs = cuts(text, args.prompts, args.seed, args.context)
    prompts = [p for p, _ in pairs]
    params = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    record = {"prompts": len(pairs), "seed": args.seed, "context": args.context}
    with Engine() as engine:
        healer = healer_for(engine.tokenizer)
        record["backed_up"] = sum(
            healer.plan(engine.tokenizer.encode(p, add_special_tokens=True), engine_params(params), True) is not None
            for p in prompts)
        for name, healing in (("off", False), ("on", True)):
            began = time.perf_counter()
            outs = engine.generate(prompts, sampling_params={**params, "token_healing": healing})
            correct = sum(o.text.startswith(t) for o, (_, t) in zip(outs, pairs))
            record[name] = {"correct": correct, "rate": round(correct / len(pairs), 3),
                            "wall_s": round(time.perf_counter() - began, 2)}
            print(f"healing {name:3}: {correct}/{len(pairs)} continue the cut word ({correct / len(pairs):.0%})")
    print(f"healing backed up {record['backed_up']}/{len(pairs)} prompts")
    print("saved to", save("token_healing", record))


def engine_params(params: dict):
    from furca.runtime.sampling_params import SamplingParams

    return SamplingParams.from_dict(params)


if __name__ == "__main__":
    main()
