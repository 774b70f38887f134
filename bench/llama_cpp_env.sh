#!/usr/bin/env bash
# Builds the llama.cpp side of bench/quantization.py: a virtualenv of its own,
# bench/.llama-venv (git-ignored), holding llama-cpp-python compiled from its PyPI source
# distribution. It is never a dependency of furca.
#
# The build is CPU-only, with no BLAS library: ggml's own quantized dot products run every
# matmul, the way llama.cpp serves a GGUF file by default. It targets this machine's vector
# extensions (those of AVX2, FMA, F16C, AVX-512 F / VBMI / VNNI / BF16, AVX-VNNI that
# /proc/cpuinfo lists), named one by one rather than by -march=native because native also
# turns on ggml's AMX matmul, which on a VM whose CPU reports AMX dies with SIGILL at `tilezero` in an OpenMP
# worker of ggml_backend_amx_mul_mat on the first forward; LLAMA_NATIVE=1 builds with
# -march=native for a machine where AMX works. Only package registries are needed (pip
# fetches the sdist, which carries the vendored llama.cpp sources).
#
#   bash bench/llama_cpp_env.sh   # about 5 minutes on 2 idle cores, 20 on 2 busy ones
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

# GGML_BLAS / GGML_CUDA / GGML_VULKAN / GGML_METAL off: CPU only, ggml's own kernels,
# OpenMP threads. No tests, examples, tools, server, app, curl, openssl or the multimodal
# (llava / mtmd) library: only the shared libraries that the Python binding's text models
# load.
if [ "${LLAMA_NATIVE:-0}" = 1 ]; then
    ISA="-DGGML_NATIVE=ON"
else
    # each extension on only where /proc/cpuinfo lists it: a build for another CPU of the
    # family dies with SIGILL (AVX-VNNI and AVX512-BF16 on an Ice Lake, which has neither)
    FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    ISA="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
                avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
        if [[ "$FLAGS" == *" ${pair%%:*} "* ]]; then ISA="$ISA -DGGML_${pair##*:}=ON"; else ISA="$ISA -DGGML_${pair##*:}=OFF"; fi
    done
fi
export CMAKE_ARGS="$ISA -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
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
