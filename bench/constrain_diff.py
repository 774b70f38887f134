"""Two versions of furca.constrain, mask for mask: for a change that must not change what
any mask allows (a speed change).

    mkdir -p /tmp/a && git archive REV furca/constrain | tar -x -C /tmp/a
    .venv/bin/python bench/constrain_diff.py --a /tmp/a/furca/constrain [--b furca/constrain] [--sample 500 | --files F]

Both versions loaded in one process as bench/constrain_ab.py loads them; per schema each
compiles it (a schema only one version compiles counts as a difference), then walks
every test instance token by token (valid and invalid, up to where either stops),
filling both masks at every step. Prints the schemas, the masks compared and those
that differ (the first few with their schema, instance and step), and whether both
accepted and refused the same tokens. Exit status 1 when any differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from constrain_ab import add_ab_args, load_versions  # noqa: E402  (sets NUMBA_CACHE_DIR before numba loads)


def main() -> int:
    ap = argparse.ArgumentParser()
    add_ab_args(ap, sample=500)
    a = ap.parse_args()
    schemas, tok, versions, names = load_versions(a)
    (_la, _wa, pa, ia), (_lb, _wb, pb, ib) = versions
    compared = differ = schemas_done = 0
    firsts = []
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        grammars = []
        for pkg, info in ((pa, ia), (pb, ib)):
            try:
                grammars.append(pkg.GrammarCompiler(info).compile_json_schema(d["schema"]))
            except Exception as e:  # noqa: BLE001  (a CompileError: both sides must agree)
                grammars.append(f"{type(e).__name__}: {e}"[:120])
        ga, gb = grammars
        if isinstance(ga, str) or isinstance(gb, str):
            if isinstance(ga, str) != isinstance(gb, str):  # one version compiles what the other refuses
                differ += 1
                if len(firsts) < 5:
                    firsts.append(f"{name}: compiles in one version only ({ga if isinstance(ga, str) else gb})")
            continue
        schemas_done += 1
        ra = np.zeros((1, ia.num_words), dtype=np.int32)
        rb = np.zeros((1, ib.num_words), dtype=np.int32)
        for k, test in enumerate(d["tests"]):
            ids = tok.encode(schemas.instance_text(test["data"], d["schema"]), add_special_tokens=False).ids
            ma, mb = ga.matcher(), gb.matcher()
            for step, t in enumerate(ids + [ia.eos_token_id]):
                ma.fill_bitmask(ra)
                mb.fill_bitmask(rb)
                compared += 1
                if not np.array_equal(ra, rb):
                    differ += 1
                    if len(firsts) < 5:
                        firsts.append(f"{name} instance {k} step {step}")
                    break
                oka, okb = ma.accept_token(t), mb.accept_token(t)
                if oka != okb:
                    differ += 1
                    if len(firsts) < 5:
                        firsts.append(f"{name} instance {k} step {step}: accept {oka} / {okb}")
                    break
                if not oka:
                    break
    print(f"{schemas_done} schemas, {compared:,} masks compared, {differ} differ")
    for x in firsts:
        print("  " + x)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
