#!/usr/bin/env bash
# The GPU path in one run (#30): on a fresh machine with an NVIDIA GPU and network, build
# llama-cpp-python with CUDA into its own venv (timed), build llama-bench from the same
# llama.cpp, run the GPU tests and `chatapp bench --ngl -1 --llama-bench`, and print one
# summary. Target: under 10 minutes on 16 cores (CUDA kernels for this GPU's arch only).
#   scripts/gpu_check.sh            # work folder: ${GPU_CHECK_DIR:-/tmp/chatapp-gpu}
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${GPU_CHECK_DIR:-/tmp/chatapp-gpu}"
JOBS="$(nproc)"
mkdir -p "$WORK"
SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
T0=$(date +%s)

command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU" >&2; exit 2; }
GPU="$(nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader | head -1)"
ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
say "gpu: $GPU (CUDA arch $ARCH), $JOBS cores"

# 1. llama-cpp-python with CUDA, only this GPU's arch (all archs take several times longer)
T=$(date +%s)
python3 -m venv "$WORK/venv"
. "$WORK/venv/bin/activate"
pip install -q -U pip
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH" \
  pip install -q --no-cache-dir -e "$ROOT[test]" 2>&1 | tail -3
say "build: llama-cpp-python with CUDA in $(elapsed "$T") s"
python - <<'PY' | tee -a "$SUMMARY"
import llama_cpp
print("llama.cpp gpu offload supported:", bool(llama_cpp.llama_supports_gpu_offload()))
PY

# 2. llama-bench from the llama.cpp inside the same pinned sdist, built the same way
T=$(date +%s)
pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK/sdist"
tar -xzf "$WORK"/sdist/llama_cpp_python-0.3.36.tar.gz -C "$WORK"
LLAMA="$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp"
cmake -S "$LLAMA" -B "$WORK/llama-build" -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$WORK/llama-build" -j "$JOBS" --target llama-bench >/dev/null
BENCH="$WORK/llama-build/bin/llama-bench"
say "build: llama-bench with CUDA in $(elapsed "$T") s"

# 3. the GPU tests (they skip on a machine without offload)
cd "$ROOT"
set +e
pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -5 | tee -a "$SUMMARY"
TESTS=${PIPESTATUS[0]}
set -e

# 4. decode and prefill on the GPU against llama-bench -ngl 99, depth 1024
chatapp bench --ngl -1 --depth 1024 --reps 5 --llama-bench "$BENCH" 2>&1 | tail -25 | tee -a "$SUMMARY"
chatapp fit --json | python -c 'import json,sys; f=json.load(sys.stdin)["fit"]; print("fit:", f["verdict"])' \
  | tee -a "$SUMMARY"

say "total: $(elapsed "$T0") s; tests exit $TESTS; summary in $SUMMARY"
exit "$TESTS"
