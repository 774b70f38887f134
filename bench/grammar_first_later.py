"""The shared harness's per-token steps split into each schema's first test instance and
the later ones, per engine: where the per-token tail lies.

    .venv/bin/python bench/grammar_first_later.py bench/results/raw/NAME/results.jsonl

bench/grammar_compare.sh runs each schema in a fresh process forked from a warm one and
walks its test instances in the data file's order. An engine that keeps what it computes
(furca: masks per automaton state, made on first use) pays for a grammar's new states in
its first instance; one that computes each mask anew (llguidance) pays every time. For
every engine of the run: the whole run's per-token p99, and for the steps of the first
instances and of the later ones their count, p99, and how many lie over the whole run's
p99. A step is mask + accept (the harness's `mask_ns` + `commit_ns`); the first
instance's steps are the first len(tokens) + 1 (its EOS) of a schema's list, or all of
them where it stopped earlier (an invalid first instance). Then, per engine, the figures
issue 14's per-token target is read by: the steps over 200 and 300 µs, the sum of the
steps, and how many would stay over 200 µs if every step were 0.95 / 0.9 / 0.85 / 0.8x as
long (how far the count is from the target, 1% of the steps). Needs the harness's data
(`--data`, default ../shared/data/maskbench-dev) and the Llama-3.1 tokenizer (tests'
cache) to count the first instance's tokens.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", help="a harness run's results.jsonl")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench", "grammar"))
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import schemas
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    path, _eos = tokenizer_json("llama3_1")
    tok = Tokenizer.from_file(str(path))
    first_len: dict[str, int] = {}
    steps = collections.defaultdict(lambda: ([], []))  # engine -> (first instances' steps, later ones')
    with open(a.results, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if not r.get("mask_ns"):
                continue
            name = r["file"]
            if name not in first_len:
                with open(os.path.join(a.data, name), encoding="utf-8") as g:
                    d = json.load(g)
                t0 = d["tests"][0]
                first_len[name] = len(tok.encode(schemas.instance_text(t0["data"], d["schema"]),
                                                 add_special_tokens=False).ids) + 1
            s = (np.asarray(r["mask_ns"], dtype=np.float64) + np.asarray(r["commit_ns"], dtype=np.float64)) / 1e3
            n0 = min(first_len[name], len(s))
            first, later = steps[r.get("engine", "?")]
            first.append(s[:n0])
            later.append(s[n0:])
    print("| engine | steps | p99 µs | first instances: steps / p99 µs / over the p99 "
          "| later instances: steps / p99 µs / over the p99 |")
    print("|:--|--:|--:|--:|--:|")
    for engine, (first, later) in steps.items():
        f, g = np.concatenate(first), np.concatenate(later)
        p99 = np.percentile(np.concatenate([f, g]), 99)
        print(f"| {engine} | {len(f) + len(g):,} | {p99:,.0f} | {len(f):,} / {np.percentile(f, 99):,.0f} / "
              f"{int((f > p99).sum()):,} | {len(g):,} / {np.percentile(g, 99):,.0f} / {int((g > p99).sum()):,} |")
    print()
    print("| engine | steps over 200 µs | over 300 µs | sum of steps ms | over 200 µs if every step were "
          "0.95 / 0.9 / 0.85 / 0.8x |")
    print("|:--|--:|--:|--:|--:|")
    for engine, (first, later) in steps.items():
        x = np.concatenate(first + later)
        scaled = " / ".join(f"{int((x * k > 200).sum()):,}" for k in (0.95, 0.9, 0.85, 0.8))
        print(f"| {engine} | {int((x > 200).sum()):,} | {int((x > 300).sum()):,} | {x.sum() / 1e3:,.0f} | {scaled} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
