"""The cost of a state's first mask, by how many transition rows it built: two versions
of furca/constrain in one process, alternating per schema (as constrain_ab.py).

    .venv/bin/python bench/constrain_newmask.py --a /tmp/a/furca/constrain [--b furca/constrain] [--sample 100 | --files F]

Per schema: a cold compile, then every valid instance token by token; each
fill_bitmask is timed (thread CPU time) and classed as warm (the state's mask was
stored) or new, by the rows built during it (0, 1, 2-3, 4-7, 8+): the states that became
walkable (`LazyAutomaton.walkable`), which counts the rows the row kernel makes inside its
walks as well as Python's (until session 48 the tool counted `expand` calls, which the
kernel does not make: nearly every new mask read "0 rows"). A new mask with one row or
none is the fixed cost of a mask: the Python and numpy around the walks. Prints per
version and class: fills, p50, mean, how many took over 200 µs, and the sum.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import _sample  # noqa: E402
from constrain_ab import add_ab_args, load_versions  # noqa: E402

CLASSES = (("warm", None), ("new, 0 rows", (0, 0)), ("new, 1 row", (1, 1)), ("new, 2-3", (2, 3)),
           ("new, 4-7", (4, 7)), ("new, 8+", (8, 1 << 30)))


def _rows(auto) -> int:
    """The states of auto with a row (or one filled in part) that the walks read."""
    return int(np.count_nonzero(auto.walkable[: len(auto.configs)]))


def run_schema(pkg, info, d, tok, out):
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    try:
        g = pkg.GrammarCompiler(info).compile_json_schema(d["schema"])
        g.matcher().fill_bitmask(bm)
    except Exception:  # noqa: BLE001
        return
    store, auto = g.masks._store, g.automaton
    clock = time.thread_time_ns
    for ids in _sample.valid_ids(d, tok):
        m = g.matcher()
        for t in ids:
            n0, r0 = len(store), _rows(auto)
            t0 = clock()
            m.fill_bitmask(bm)
            dt = clock() - t0
            new, built = len(store) != n0, _rows(auto) - r0
            for name, rng in CLASSES:
                if (rng is None and not new) or (rng is not None and new and rng[0] <= built <= rng[1]):
                    out.setdefault(name, []).append(dt)
                    break
            if not m.accept_token(t):
                break


def main():
    ap = argparse.ArgumentParser()
    add_ab_args(ap, sample=100)
    a = ap.parse_args()
    _schemas, tok, loaded, names = load_versions(a)
    versions = [(*v, {}) for v in loaded]
    for k, name in enumerate(names):
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        for _label, _where, pkg, info, out in (versions if k % 2 == 0 else versions[::-1]):
            run_schema(pkg, info, d, tok, out)
    for label, where, _pkg, _info, out in versions:
        print(f"{label} {where}")
        for name, _rng in CLASSES:
            x = np.array(out.get(name, []), dtype=float) / 1e3
            if not len(x):
                print(f"  {name:12s} n {0:6d}")
                continue
            print(f"  {name:12s} n {len(x):6d}  p50 {np.median(x):7.1f}  mean {x.mean():7.1f}  "
                  f">200 µs {(x > 200).sum():5d}  sum {x.sum() / 1e3:7.0f} ms")


if __name__ == "__main__":
    main()
