"""Compares two --dump files of bench/constrain_maskbench.py over the schemas both passed.

    .venv/bin/python bench/constrain_compare_dumps.py BEFORE.jsonl AFTER.jsonl

Prints, for each file, pass counts and TTFM / per-token percentiles (with the sum of the
steps and how many took over 500 µs) over all its schemas and over the schemas that
passed in both (the fair comparison: a schema that times out in one run drops its slow
steps from that run's distribution).
"""

from __future__ import annotations

import json
import sys

import numpy as np


def load(path):
    with open(path, encoding="utf-8") as f:
        return {r["file"]: r for r in map(json.loads, f)}


def summary(label, recs):
    ttfm = [r["ttfm_ns"] / 1e6 for r in recs if r["ttfm_ns"] is not None]
    steps = [x / 1e3 for r in recs for x in r["steps_ns"]]

    def p(xs, q):
        return float(np.percentile(xs, q)) if xs else float("nan")

    print(f"{label:28s} schemas {len(recs):4d}  TTFM ms p50 {p(ttfm, 50):7.2f} p90 {p(ttfm, 90):8.1f} "
          f"p99 {p(ttfm, 99):8.1f}  | token µs p50 {p(steps, 50):6.1f} p90 {p(steps, 90):7.1f} "
          f"p95 {p(steps, 95):7.1f} p99 {p(steps, 99):8.1f} max {max(steps) if steps else float('nan'):9.0f} "
          f"sum {sum(steps) / 1e3:8.0f} ms, {sum(x > 500 for x in steps)} over 500 µs (n={len(steps)})")


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    both = sorted(n for n in a if n in b and a[n]["status"] == b[n]["status"] == "pass")
    for label, d in (("before", a), ("after", b)):
        counts = {}
        for r in d.values():
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        print(label, json.dumps(counts))
    summary("before, all", list(a.values()))
    summary("after, all", list(b.values()))
    summary("before, passed in both", [a[n] for n in both])
    summary("after, passed in both", [b[n] for n in both])


if __name__ == "__main__":
    main()
