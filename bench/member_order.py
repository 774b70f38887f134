"""What member_order="any" costs (json_schema/any_order.py, furca/constrain/members.py):
the same token sequences through a schema's grammar in schema order and in any order,
in one process.

    .venv/bin/python bench/member_order.py [--files LIST] [--data ../shared/data/maskbench-dev]
                                           [--walks 4] [--rounds 3]

Schemas: LIST (one maskbench-dev file name per line; default: the harness's 500 sample
of bench/results/raw/*/sample.json is not assumed, so give it) that compile both ways.
Token sequences: random walks under the schema-order grammar's masks (seeded, as
bench/unique_items.py walks), kept when the any-order grammar accepts them too (it
refuses a free key written twice, which the schema orders let through). Each round
replays every sequence through fresh matchers of both grammars (compiled once, so warm
after round 1), alternating per schema, fill_bitmask + accept_token per step, thread
CPU time. Prints time to first mask (cold compile + first mask), per-step percentiles,
the sums and their ratio, and the automaton states each grammar built.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from furca.constrain import CompileError, GrammarCompiler, TokenizerInfo  # noqa: E402
from tests.constrain.generation import closer_tokens  # noqa: E402
from tests.constrain.tokenizers_cache import tokenizer_json  # noqa: E402
from unique_items import _replay, _walk_ids, clock  # noqa: E402

ORDERS = ("schema", "any")


def _accepts(g, ids, eos):
    m = g.matcher()
    return all(m.accept_token(t) for t in ids) and m.accept_token(eos)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--walks", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    closer = closer_tokens(info)
    rng = np.random.default_rng(args.seed)
    with open(args.files, encoding="utf-8") as f:
        names = [ln.strip() for ln in f if ln.strip()]
    cases, ttfm, dropped = [], {o: [] for o in ORDERS}, 0
    for name in names:
        with open(os.path.join(args.data, name), encoding="utf-8") as f:
            schema = json.load(f)["schema"]
        pair, times = [], []
        for order in ORDERS:
            comp = GrammarCompiler(info)  # its own cache: the TTFM is a cold compile
            t0 = clock()
            try:
                g = comp.compile_json_schema(schema, member_order=order)
            except CompileError:
                break
            g.matcher().get_allowed_tokens()
            times.append(clock() - t0)
            pair.append(g)
        if len(pair) < 2:
            continue
        for o, t in zip(ORDERS, times):
            ttfm[o].append(t)
        seqs = []
        for _ in range(args.walks):
            ids = _walk_ids(pair[0], info, closer, rng, args.max_steps)
            if ids is None:
                continue
            if _accepts(pair[1], ids, info.eos_token_id):
                seqs.append(ids)
            else:
                dropped += 1
        cases.append((name, pair, seqs))
    steps = {o: [] for o in ORDERS}
    for r in range(args.rounds):
        for i, (_name, pair, seqs) in enumerate(cases):
            order = list(zip(ORDERS, pair))
            for kind, g in order if (i + r) % 2 == 0 else order[::-1]:
                _replay(g, seqs, info, steps[kind] if r > 0 or args.rounds == 1 else [])
    print(f"{len(cases)} schemas, {sum(len(c[2]) for c in cases)} walks ({dropped} dropped: any order refused them), "
          f"{len(steps['any'])} steps timed per grammar (rounds 2..{args.rounds}; thread CPU time)")
    for kind in ORDERS:
        x = np.array(steps[kind]) / 1e3
        t = np.array(ttfm[kind]) / 1e6
        states = sum(c[1][ORDERS.index(kind)].num_states for c in cases)
        print(f"{kind:6s} TTFM p50 {np.percentile(t, 50):6.2f}  p99 {np.percentile(t, 99):6.1f} ms | per step p50 "
              f"{np.percentile(x, 50):6.1f}  p90 {np.percentile(x, 90):7.1f}  p99 {np.percentile(x, 99):8.1f}  "
              f"max {x.max():8.1f} µs  sum {x.sum() / 1e3:8.1f} ms | states {states}")
    print("sum of steps, any / schema: %.2fx" % (sum(steps["any"]) / sum(steps["schema"])))


if __name__ == "__main__":
    main()
