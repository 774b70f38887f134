"""The warm per-token path of two versions of furca.constrain, in one process: per schema
(a stratified MaskBench sample), both versions compile it and walk its valid instances
once (every mask and step computed), then every step of the first valid instance is
timed again, warm: fill_bitmask alone, and accept_token + rollback(1), each a median of
--repeat calls (thread CPU time), A and B alternating per step.

    .venv/bin/python bench/constrain_warm.py --a /tmp/a/furca/constrain [--b furca/constrain] [--sample 100]

Prints per version the fill and accept+rollback percentiles (µs) over all steps, and
the p50 of B/A per step. Complements bench/constrain_ab.py (cold and warm steps mixed).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from constrain_ab import add_ab_args, load_versions


def timed(f, repeat):
    clock = time.thread_time_ns
    ts = []
    for _ in range(repeat):
        t0 = clock()
        f()
        ts.append(clock() - t0)
    ts.sort()
    return ts[len(ts) // 2] / 1e3


def main():
    ap = argparse.ArgumentParser()
    add_ab_args(ap, sample=100)
    ap.add_argument("--repeat", type=int, default=41)
    a = ap.parse_args()
    schemas, tok, loaded, names = load_versions(a)
    versions = [(*v, {"fill": [], "accept": []}) for v in loaded]
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        valid = [t for t in d["tests"] if t["valid"]]
        if not valid:
            continue
        runs = []
        for _label, _where, pkg, info, out in versions:
            bm = np.zeros((1, info.num_words), dtype=np.int32)
            try:
                g = pkg.GrammarCompiler(info).compile_json_schema(d["schema"])
            except Exception:  # noqa: BLE001  (a CompileError: not timed)
                break
            for test in valid:  # warm: every mask and step of every valid instance computed
                m = g.matcher()
                for t in tok.encode(schemas.instance_text(test["data"], d["schema"]), add_special_tokens=False).ids:
                    m.fill_bitmask(bm)
                    if not m.accept_token(t):
                        break
            ids = tok.encode(schemas.instance_text(valid[0]["data"], d["schema"]), add_special_tokens=False).ids
            runs.append((g.matcher(), bm, ids, out))
        if len(runs) < 2:
            continue
        for k in range(len(runs[0][2])):
            for m, bm, ids, out in (runs if k % 2 == 0 else runs[::-1]):
                t = ids[k]
                out["fill"].append(timed(lambda: m.fill_bitmask(bm), a.repeat))
                out["accept"].append(timed(lambda: (m.accept_token(t), m.rollback(1)), a.repeat))
                m.accept_token(t)
    for label, where, _pkg, _info, out in versions:
        f, c = np.array(out["fill"]), np.array(out["accept"])
        print(f"{label} {where}: n={len(f)} fill µs p25/p50/p75 " + "/".join(f"{np.percentile(f, q):.2f}" for q in (25, 50, 75))
              + " | accept+rollback " + "/".join(f"{np.percentile(c, q):.2f}" for q in (25, 50, 75))
              + f" | sum p50 {np.percentile(f + c, 50):.2f}")
    (fa, ca), (fb, cb) = [(np.array(v[4]["fill"]), np.array(v[4]["accept"])) for v in versions]
    print(f"B/A per step p50: fill {np.median(fb / fa):.3f}, accept+rollback {np.median(cb / ca):.3f}")


if __name__ == "__main__":
    main()
