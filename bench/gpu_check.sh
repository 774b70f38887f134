#!/usr/bin/env bash
# The GPU check of furca's Triton kernels, for an H200 (or any CUDA GPU), offline.
#
#   bash bench/gpu_check.sh            # from the checkout root, on the GPU machine
#   bash bench/gpu_check.sh --smoke    # anywhere: CPU, interpreted kernels, tiny shapes
#
# Uses the machine's python3 with its own torch and Triton (PYTHON=... to override);
# wheels it lacks (gguf, lark, ...) may travel in .whl/ and are installed to a temp
# dir first: `bash bench/gpu_prepare.sh` makes .whl/ and .gpu-model/ on a networked box. Writes bench/results/raw/gpu-<date>/ (RESULTS_DIR=... to override):
#   env.txt           nvidia-smi, versions
#   kernel_tests.txt  pytest tests/kernels on CUDA (fp32, fp16, bf16)
#   results.md/.json  copy bandwidth; decode attention bandwidth vs copy (target
#                     >= 70%); extend attention vs SDPA; engine decode tokens/s,
#                     Triton vs torch backend, batch 1 and 64 (bench/gpu_kernels.py);
#                     int4 / int8 / fp8 weight-only matmuls: GB/s at M = 1 vs copy,
#                     TFLOP/s at M = 64, both vs bf16 F.linear (bench/gpu_quant.py);
#                     decode attention over an fp8 (e4m3) vs a bf16 KV pool: ms, GB/s,
#                     speed-up, error (bench/gpu_kv_fp8.py; sm_89+, else skipped)
#   bench.txt         that script's log
#   constrained_step.txt  32 concurrent json_schema requests (MaskBench schemas) against
#                     the same 32 unconstrained: decode step time ratio, mask fill / wait /
#                     apply / accept per step (bench/constrained_step.py, random weights with
#                     the default model's config and tokenizer from GPU_MODEL_DIR, default
#                     .gpu-model: the files `furca pull` writes less model.safetensors;
#                     skipped with a message where that folder is missing)
#   tp.txt            TP=2 vs one GPU, decode tokens/s and collective time per step
#                     (bench/tp.py); skipped with a message on a machine with one GPU
# Budget: about 2 minutes of tests, 2.5 of kernel benchmarks and 1.5 of the constrained step (each under a timeout), so the
# whole check ends within 7 minutes (8 with two or more GPUs: the TP run). Exit status:
# non-zero if any part failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SMOKE=""
[[ "${1:-}" == "--smoke" ]] && SMOKE="--smoke"
PY="${PYTHON:-python3}"
[[ -n "$SMOKE" && -z "${PYTHON:-}" && -x .venv/bin/python ]] && PY=.venv/bin/python
RESULTS_DIR="${RESULTS_DIR:-bench/results/raw/gpu-$(date -u +%Y-%m-%d)${SMOKE:+-smoke}}"
mkdir -p "$RESULTS_DIR"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/furca-gpu-site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/furca-gpu-site"
fi

{
    date -u
    nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    "$PY" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "triton", triton.__version__, "device",
torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")'
} >"$RESULTS_DIR/env.txt" 2>&1
cat "$RESULTS_DIR/env.txt"

# 1. the kernel tests on CUDA (bf16 included); several workers compile in parallel
status=0
XDIST=""
if [[ -z "$SMOKE" ]] && "$PY" -c 'import xdist' 2>/dev/null; then XDIST="-n 6"; fi
TEST_TIMEOUT=130
[[ -n "$SMOKE" ]] && TEST_TIMEOUT=900  # interpreted on CPU: slower, and not timed
env ${SMOKE:+TRITON_INTERPRET=1} timeout "$TEST_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider $XDIST \
    tests/kernels 2>&1 | tee "$RESULTS_DIR/kernel_tests.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "kernel tests FAILED (or timed out)"; status=1; }

# 2. the measurements
timeout 170 "$PY" bench/gpu_kernels.py $SMOKE --out "$RESULTS_DIR" 2>&1 | tee "$RESULTS_DIR/bench.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "gpu_kernels.py FAILED (or timed out)"; status=1; }

# 2b. constrained decoding beside the forward pass: 32 json_schema requests vs 32 plain ones
GPU_MODEL_DIR="${GPU_MODEL_DIR:-.gpu-model}"
if [[ -f "$GPU_MODEL_DIR/config.json" && -f "$GPU_MODEL_DIR/tokenizer.json" ]]; then
    args=(--random-weights "$GPU_MODEL_DIR")
    [[ -n "$SMOKE" ]] && args+=(--rounds 1 --steps 4)
    timeout 150 "$PY" bench/constrained_step.py "${args[@]}" 2>&1 | tee "$RESULTS_DIR/constrained_step.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "constrained_step.py FAILED (or timed out)"; status=1; }
else
    echo "constrained step skipped: no $GPU_MODEL_DIR/config.json and tokenizer.json (bash bench/gpu_prepare.sh makes them)" \
        | tee "$RESULTS_DIR/constrained_step.txt"
fi

# 3. tensor parallelism: TP=2 against one GPU (bench/tp.py, NCCL), where there are two or more
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [[ -z "$SMOKE" && "$NGPU" -ge 2 ]]; then
    timeout 170 "$PY" bench/tp.py --batch 1,64 --tokens 64 2>&1 | tee "$RESULTS_DIR/tp.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "tp.py FAILED (or timed out)"; status=1; }
else
    echo "TP=2 check skipped: ${NGPU} GPU(s) here, it needs 2 or more" | tee "$RESULTS_DIR/tp.txt"
fi

echo "results: $RESULTS_DIR"
exit $status
