#!/usr/bin/env bash
# Prepare what bench/gpu_check.sh needs on a GPU machine that cannot reach a registry,
# from this (networked) checkout: run it here, then send .whl/ and .gpu-model/ along.
#
#   bash bench/gpu_prepare.sh          # after `make setup && .venv/bin/furca pull`
#
# .whl/        furca's pure-Python dependencies the device image lacks (jsonschema and
#              its own, gguf, lark) as cp312 manylinux wheels, the versions of .venv;
#              gpu_check.sh installs them to a temp dir first. The image's own torch,
#              Triton, numpy and numba are used as they are.
# .gpu-model/  the default model's config and tokenizer (`furca pull` writes them; its
#              weights, 98 MB as Q4_1, are over what a device call carries): the
#              constrained-step section builds random weights on them.
# Both are ignored by git (.gitignore). Figures of the first run: bench/results/gpu.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
MODEL="${FURCA_HOME:-$HOME/.cache/furca}/models/SmolLM2-135M-Instruct"
[[ -f "$MODEL/tokenizer.json" ]] || { echo "no $MODEL: run .venv/bin/furca pull first" >&2; exit 1; }

mkdir -p .gpu-model
for f in config.json tokenizer.json tokenizer_config.json generation_config.json chat_template.jinja; do
    [[ -f "$MODEL/$f" ]] && cp "$MODEL/$f" .gpu-model/
done

pins=()
for name in jsonschema jsonschema-specifications referencing rpds-py jsonpointer gguf lark; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
    [[ -n "$version" ]] || { echo "$name is not installed in .venv" >&2; exit 1; }
    pins+=("$name==$version")
done
rm -rf .whl && mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${pins[@]}"
echo "ready: $(ls .whl | wc -l) wheels in .whl/, $(ls .gpu-model | wc -l) files in .gpu-model/"
echo "on the GPU machine: RESULTS_DIR=<dir> bash bench/gpu_check.sh"
