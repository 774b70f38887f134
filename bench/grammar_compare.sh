#!/usr/bin/env bash
# furca side by side with xgrammar, llguidance and outlines-core on the shared
# MaskBench harness (../shared/bench/grammar/run.py), in the benchmark venv.
#
#   bash bench/grammar_compare.sh                       # the full comparison (500 schemas, all four engines)
#   bash bench/grammar_compare.sh --sample 20 --engines furca,xgrammar,llguidance   # smoke test
#   bash bench/grammar_compare.sh --engines furca --out bench/results/raw/grammar-DATE/furca
#   bash bench/grammar_compare.sh merge OUT DIR1 DIR2 ...   # one report over runs of disjoint engines
#
# Defaults: --engines furca,xgrammar,llguidance,outlines_core --xgr-whitespace compact
# --sample 500, output bench/results/raw/grammar-<date>/. Any other run.py option passes
# through (--timeout-s 30, --jobs, --tokenizer ...); a later option wins.
# Needs .bench-venv (bash ../shared/bench/grammar/setup.sh, then
# .bench-venv/bin/pip install -e . numba). Runs single-threaded; with --jobs 1 on
# 2 cores, 500 schemas take a few minutes per engine, about an hour for outlines-core.
# `merge` concatenates the results.jsonl of runs made with the same sample and
# options (e.g. the peers once, furca after a change) and renders results.md with
# the harness's report.py, so the "every engine passed" tables cover all of them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HARNESS="${FURCA_GRAMMAR_HARNESS:-$ROOT/../shared/bench/grammar}"
PY="${BENCH_PY:-$ROOT/.bench-venv/bin/python}"
cd "$ROOT"

if [[ ! -f "$HARNESS/run.py" ]]; then
    echo "harness not found: $HARNESS/run.py (set FURCA_GRAMMAR_HARNESS)" >&2
    exit 2
fi
if [[ ! -x "$PY" ]]; then
    echo "benchmark venv not found: $PY (bash $HARNESS/setup.sh; .bench-venv/bin/pip install -e . numba)" >&2
    exit 2
fi

if [[ "${1:-}" == "merge" ]]; then
    shift
    out="$1"
    shift
    mkdir -p "$out"
    # one meta line (the first run's, with the engines of all runs), then every other line
    "$PY" - "$out/results.jsonl" "$@" <<'PYEOF'
import json, shutil, sys, os
out, dirs = sys.argv[1], sys.argv[2:]
meta, rest = None, []
for d in dirs:
    with open(os.path.join(d, "results.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "meta":
                if meta is None:
                    meta = r
                    meta["merged_from"] = []
                else:
                    meta["engines"] = meta["engines"] + [e for e in r["engines"] if e not in meta["engines"]]
                meta["merged_from"].append({"dir": d, "date": r.get("date"), "engines": r.get("engines")})
            else:
                rest.append(line)
with open(out, "w", encoding="utf-8") as f:
    f.write(json.dumps(meta, ensure_ascii=False) + "\n")
    f.writelines(rest)
shutil.copy(os.path.join(dirs[0], "sample.json"), os.path.join(os.path.dirname(out), "sample.json"))
PYEOF
    "$PY" "$HARNESS/report.py" "$out/results.jsonl" > "$out/results.md"
    "$PY" "$HARNESS/report.py" "$out/results.jsonl" --failures > "$out/failures.md" || true
    cat "$out/results.md"
    exit 0
fi

out="bench/results/raw/grammar-$(date +%Y-%m-%d)"
args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --out=*) out="${1#--out=}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$out"
export OMP_NUM_THREADS=1 RAYON_NUM_THREADS=1 NUMBA_NUM_THREADS=1
exec "$PY" "$HARNESS/run.py" \
    --engines furca,xgrammar,llguidance,outlines_core --xgr-whitespace compact --sample 500 \
    --furca-path "$ROOT" "${args[@]}" --out "$out"
