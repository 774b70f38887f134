"""What watching uniqueItems arrays costs (furca/constrain/unique.py, unique_values.py):
the same token sequences through a schema's grammar with its watched arrays and through
the grammar of the same schema without `uniqueItems`, in one process.

    .venv/bin/python bench/unique_items.py [--data ../shared/data/maskbench-dev] [--walks 8] [--rounds 3]
                                           [--watch all|strings|values]

Schemas: every maskbench-dev file whose grammar watches an array (it names uniqueItems
and compiles to a UniqueMatcher) and whose stripped copy compiles too; --watch strings:
only those whose arrays are all of strings / integers (unique.py), values: those with
an array compared as values (unique_values.py). Token sequences:
random walks under the watched grammar's masks (seeded; EOS when allowed, else a random
allowed token, closing bytes favoured), so both grammars accept them (the watched
language is a subset). Each round replays every sequence through fresh matchers of both
grammars (compiled once, so the automata are warm after round 1), A then B alternating
per schema, timing fill_bitmask + accept_token per step with the thread's CPU clock.
Prints per grammar: time to first mask (cold compile + first mask), per-step p50 / p90 /
p99 / max and the sum over all steps, and the ratio of the sums.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from furca.constrain import CompileError, GrammarCompiler, TokenizerInfo  # noqa: E402
from tests.constrain.generation import closer_tokens  # noqa: E402
from tests.constrain.tokenizers_cache import tokenizer_json  # noqa: E402

clock = time.thread_time_ns


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k != "uniqueItems"}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _walk_ids(g, info, closer, rng, max_steps):
    """Token ids of one random walk that ends with an accepted EOS, or None."""
    m, ids = g.matcher(), []
    eos = info.eos_token_id
    for step in range(max_steps):
        allowed = m.get_allowed_tokens()
        if eos in allowed and (rng.random() < 0.8 or len(allowed) == 1):
            return ids
        allowed = allowed[allowed != eos]
        if not len(allowed):
            return None
        if rng.random() < min(0.9, 0.2 + step / 100):
            near = allowed[closer[allowed]]
            if len(near):
                allowed = near
        t = int(allowed[rng.integers(len(allowed))])
        assert m.accept_token(t), m.error
        ids.append(t)
    return None


def _replay(g, seqs, info, out):
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    eos = info.eos_token_id
    for ids in seqs:
        m = g.matcher()
        for t in ids + [eos]:
            t0 = clock()
            m.fill_bitmask(bm)
            ok = m.accept_token(t)
            out.append(clock() - t0)
            assert ok, m.error


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--walks", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--watch", default="all", choices=("all", "strings", "values"))
    args = ap.parse_args()
    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    closer = closer_tokens(info)
    rng = np.random.default_rng(args.seed)
    cases, ttfm = [], {"watched": [], "stripped": []}
    for name in sorted(os.listdir(args.data)):
        with open(os.path.join(args.data, name)) as f:
            text = f.read()
        if '"uniqueItems"' not in text:
            continue
        schema = json.loads(text)["schema"]
        pair, times = [], []
        for s in (schema, _strip(schema)):
            comp = GrammarCompiler(info)  # its own cache: the TTFM is a cold compile
            t0 = clock()
            try:
                g = comp.compile_json_schema(s)
            except CompileError:
                break
            g.matcher().get_allowed_tokens()
            times.append(clock() - t0)
            pair.append(g)
        if len(pair) < 2 or (pair[0].unique_sites is None and pair[0].value_sites is None):
            continue
        if args.watch != "all" and (pair[0].value_sites is not None) != (args.watch == "values"):
            continue
        ttfm["watched"].append(times[0])
        ttfm["stripped"].append(times[1])
        seqs = [s for s in (_walk_ids(pair[0], info, closer, rng, args.max_steps) for _ in range(args.walks)) if s]
        cases.append((name, pair, seqs))
    steps = {"watched": [], "stripped": []}
    for r in range(args.rounds):
        for i, (_name, (watched, stripped), seqs) in enumerate(cases):
            order = [("watched", watched), ("stripped", stripped)]
            for kind, g in order if (i + r) % 2 == 0 else order[::-1]:
                _replay(g, seqs, info, steps[kind] if r > 0 or args.rounds == 1 else [])
    print(f"{len(cases)} schemas, {sum(len(c[2]) for c in cases)} walks, "
          f"{len(steps['watched'])} steps timed per grammar (rounds 2..{args.rounds}; thread CPU time)")
    for kind in ("watched", "stripped"):
        x = np.array(steps[kind]) / 1e3
        t = np.array(ttfm[kind]) / 1e6
        print(f"{kind:9s} TTFM p50 {np.percentile(t, 50):6.2f} ms  max {t.max():6.1f} ms | per step p50 "
              f"{np.percentile(x, 50):6.1f}  p90 {np.percentile(x, 90):7.1f}  p99 {np.percentile(x, 99):8.1f}  "
              f"max {x.max():8.1f} µs  sum {x.sum() / 1e3:8.1f} ms")
    print("sum of steps, watched / stripped: %.2fx" % (sum(steps["watched"]) / sum(steps["stripped"])))


if __name__ == "__main__":
    main()
