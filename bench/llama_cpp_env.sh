#!/usr/bin/env bash
# Builds the llama.cpp side of bench/quantization.py: a virtualenv of its own,
# bench/.llama-venv (git-ignored), holding llama-cpp-python compiled from its PyPI source
# distribution. It is never a dependency of furca.
#
# The build is CPU-only and native (-march=native, so it uses this machine's AVX-512 /
# AVX512_BF16 / AMX as furca does), with no BLAS library: ggml's own quantized dot products
# run every matmul, the way llama.cpp serves a GGUF file by default. Only package registries
# are needed (pip fetches the sdist, which carries the vendored llama.cpp sources).
#
#   bash bench/llama_cpp_env.sh            # build (about half an hour on 2 busy cores)
#   PYTHON=python3.12 bash bench/llama_cpp_env.sh
#
# Re-running it rebuilds in place. The build runs under `nice` so it yields to other work.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${LLAMA_VENV:-$HERE/.llama-venv}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip

# GGML_NATIVE: -march=native. GGML_BLAS / GGML_CUDA / GGML_VULKAN / GGML_METAL off: CPU
# only, ggml's own kernels, OpenMP threads. No tests, examples, tools, server, app, curl,
# openssl or the multimodal (llava / mtmd) library: only the shared libraries that the
# Python binding's text models load.
export CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
-DGGML_METAL=OFF -DGGML_OPENMP=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
-DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release"
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"

start=$(date +%s)
nice -n 10 "$VENV/bin/python" -m pip install --no-cache-dir --force-reinstall \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
end=$(date +%s)

"$VENV/bin/python" - <<PY
import llama_cpp
print("llama-cpp-python", llama_cpp.__version__)
print("system info:", llama_cpp.llama_print_system_info().decode())
PY
echo "build time: $((end - start)) s with $JOBS jobs"
