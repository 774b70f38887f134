#!/usr/bin/env bash
# Run the test suite while N CPU hogs compete for the cores (issue 12: the suite must not
# depend on how fast the machine is). Uses `stress-ng --cpu N` when installed, otherwise N
# pure-Python spin loops; the hogs are killed on exit, however the run ends.
#
#   scripts/test_under_load.sh                 # 4 hogs, the whole suite (as `make test` runs it)
#   LOAD=8 scripts/test_under_load.sh tests/server -x
#
# Env: LOAD (number of hogs, default 4), PY (python, default .venv/bin/python),
# HOG=python (busy Python loops even where stress-ng is installed).
# Extra arguments replace the default test path `tests`.
set -euo pipefail
cd "$(dirname "$0")/.."
LOAD="${LOAD:-4}"
PY="${PY:-.venv/bin/python}"
HOG_PIDS=()

cleanup() {
    for pid in "${HOG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${HOG_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${HOG:-}" != python ] && command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu "$LOAD" --quiet &
    HOG_PIDS+=("$!")
    echo "test_under_load: stress-ng --cpu $LOAD (pid $!)" >&2
else
    for _ in $(seq "$LOAD"); do
        "$PY" -c 'while True: pass' &
        HOG_PIDS+=("$!")
    done
    echo "test_under_load: $LOAD busy Python processes (pids ${HOG_PIDS[*]})" >&2
fi

if [ "$#" -eq 0 ]; then
    set -- tests
fi
start=$(date +%s)
status=0
"$PY" -m pytest -q -p no:cacheprovider --timeout=900 "$@" || status=$?
echo "test_under_load: $(( $(date +%s) - start )) s, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
