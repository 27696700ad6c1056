#!/usr/bin/env bash
# The GPU path in one run on a lent machine that reaches no network (docs/gpu.md, #43):
#   scripts/gpu_check.sh --offline DIR         # DIR: made here by scripts/gpu_prepare.sh, carried
#   scripts/gpu_check.sh --offline DIR --cpu   # the dry run: every step but the GPU ones, CUDA off
# One CMake build makes llama-cpp-python (CUDA for this GPU's architecture only) and llama-bench
# from the same trimmed llama.cpp; then chatapp installs from DIR's wheels (pip --no-index), the
# GPU tests run, `chatapp bench --ngl -1` runs against llama-bench -ngl 99, an out-of-memory load
# shows the GPU-layer step-down, and one summary is printed (and copied to $OUT when set).
# GPU_CHECK_PYTHON: the machine's Python 3.11+ with its preinstalled packages (python3).
# GPU_CHECK_REPS: bench repetitions (3).
# GPU_CHECK_WORK: the work folder (/tmp/chatapp-gpu, -cpu for --cpu); a rerun keeps its CMake
# build, so a run cut short by a time limit resumes the compile where it stopped.
# Logs and the summary go to $OUT when set (what a lent machine hands back), else WORK/logs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() { echo "usage: $0 --offline DIR [--cpu]" >&2; exit 2; }
DIR="" CPU=0
while [ $# -gt 0 ]; do
  case "$1" in
    --offline) [ $# -ge 2 ] || usage; DIR="$(realpath -m "$2")"; shift 2 ;;
    --cpu) CPU=1; shift ;;
    *) usage ;;
  esac
done
[ -n "$DIR" ] || usage
PY="${GPU_CHECK_PYTHON:-python3}"
WORK="${GPU_CHECK_WORK:-/tmp/chatapp-gpu$([ "$CPU" = 0 ] || echo -cpu)}"
JOBS="$(nproc)"
REPS="${GPU_CHECK_REPS:-3}"
LEAVE_GIB=6  # GPU memory left free by the hog for the out-of-memory load (scripts/gpu_oom.py)
"$PY" "$ROOT/scripts/gpu_carry.py" check "$DIR" --limit-mb 64 >/dev/null || exit 2

# Nothing from the network: pip reads DIR's wheels only, the Hub client stays offline.
export HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 PIP_FIND_LINKS="$DIR/wheels" PIP_CONFIG_FILE=/dev/null
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_PROGRESS_BAR=off
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
# chatapp's own folders, empty, and no tune on first use (the defaults: flash attention auto
# on a GPU)
export CHATAPP_DATA_DIR="$WORK/home/data" CHATAPP_CONFIG_DIR="$WORK/home/config"
export CHATAPP_CACHE_DIR="$WORK/home/cache" CHATAPP_CONFIG="$WORK/home/config/config.toml"
export CHATAPP_AUTOTUNE=0 CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"

# A fresh work folder, but for the unpacked source and its CMake build when the carried
# archive is the same one (ninja then rebuilds nothing, or only what a cut-short run left)
mkdir -p "$WORK"
ARCHIVE="$(ls "$DIR"/llama_cpp_python-*.tar.xz)"
STAMP="$(sha256sum "$ARCHIVE" | cut -c1-16)"
if [ "$(cat "$WORK/source.stamp" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf "$WORK"/llama_cpp_python-* "$WORK/build"
  tar -xJf "$ARCHIVE" -C "$WORK"
  echo "$STAMP" >"$WORK/source.stamp"
fi
find "$WORK" -mindepth 1 -maxdepth 1 ! -name build ! -name 'llama_cpp_python-*' \
  ! -name source.stamp -exec rm -rf {} +
LOGS="${OUT:-$WORK/logs}"
mkdir -p "$WORK/home" "$LOGS"
SUMMARY="$LOGS/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
T0=$(date +%s)
FAILED=()

if [ "$CPU" = 1 ]; then
  ARCH="" CMAKE_GPU=""
  say "dry run (--cpu): CUDA off, $JOBS cores, $("$PY" --version)"
  # Stand in for the lent machine's preinstalled packages (DIR-device-base, gpu_prepare.sh)
  "$PY" -m venv "$WORK/device"
  "$WORK/device/bin/pip" install -q --find-links "$DIR-device-base" "$DIR-device-base"/*.whl
  PY="$WORK/device/bin/python"
else
  command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: use --cpu for the dry run" >&2; exit 2; }
  command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || PATH="/usr/local/cuda/bin:$PATH"
  GPU="$(nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader | head -1)"
  ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
  CMAKE_GPU="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH"
  say "gpu: $GPU (CUDA arch $ARCH), $JOBS cores, $("$PY" --version)"
fi

# 0. a venv over the machine's own packages (a .pth to its site folders, which also works when
#    python3 is itself a venv), pip from the carried wheel
"$PY" -m venv --without-pip "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
  >"$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_machine.pth"
PIP_WHEEL="$(ls "$DIR"/wheels/pip-*.whl | head -1)"
"$VPY" "$PIP_WHEEL/pip" install -q "$PIP_WHEEL"
PIP=("$VPY" -m pip install -q)

# 1. one CMake build: llama-cpp-python (this GPU's architecture only) and llama-bench beside it
#    (tools on; mtmd then comes from llama.cpp's tools/, so llama-cpp-python's own copy is off:
#    chatapp does not use it)
T=$(date +%s)
SRC="$(ls -d "$WORK"/llama_cpp_python-*/)"
CMAKE_ARGS="$CMAKE_GPU -DLLAMA_BUILD_TOOLS=ON -DLLAVA_BUILD=OFF" \
  "$VPY" -m pip install -v -C build-dir="$WORK/build" "$SRC" >"$LOGS/build.log" 2>&1 \
  || { tail -30 "$LOGS/build.log"; say "build: llama-cpp-python FAILED (build.log)"; exit 1; }
BENCH="$(find "$WORK/build" -name llama-bench -type f -perm -u+x | head -1)"
say "build: llama-cpp-python and llama-bench (${CMAKE_GPU:-CPU only}) in $(elapsed "$T") s"
OFFLOAD="$("$VPY" -c 'import llama_cpp; print(bool(llama_cpp.llama_supports_gpu_offload()))')"
say "llama.cpp gpu offload supported: $OFFLOAD"
[ "$CPU" = 1 ] || [ "$OFFLOAD" = True ] || FAILED+=("no GPU offload in the CUDA build")
"$BENCH" --help >/dev/null || FAILED+=("llama-bench does not start")

# 2. chatapp from the working tree, its dependencies from the carried wheels only
T=$(date +%s)
"${PIP[@]}" "$ROOT" pytest pytest-asyncio >"$LOGS/install.log" 2>&1 \
  || { tail -20 "$LOGS/install.log"; say "install: chatapp FAILED (install.log)"; exit 1; }
CHATAPP="$WORK/venv/bin/chatapp"
say "install: chatapp --no-index in $(elapsed "$T") s"

# 3. the GPU tests (test_gpu.py skips without offload: it must not on a GPU)
cd "$ROOT"
T=$(date +%s)
set +e
"$VPY" -m pytest -q -rs -p no:cacheprovider tests/engine/test_gpu.py tests/engine/test_gpu_fallback.py \
  >"$LOGS/tests.log" 2>&1
TESTS=$?
set -e
say "tests ($(elapsed "$T") s): $(tail -1 "$LOGS/tests.log")"
[ "$TESTS" = 0 ] || FAILED+=("GPU tests (tests.log)")
if [ "$CPU" = 0 ] && grep -q "skipped" <(tail -1 "$LOGS/tests.log"); then
  FAILED+=("GPU tests skipped on a GPU")
fi

# 4. one reply with every layer offloaded, as `ask --json` reports it
"$CHATAPP" ask "Count to ten." --ngl -1 --max-tokens 32 --temperature 0 --json \
  2>"$LOGS/ask.log" | "$VPY" -c 'import json, sys
d = json.load(sys.stdin)
s, t = d.get("settings") or {}, d
print("ask --ngl -1:", s.get("n_gpu_layers"), "gpu layers, flash attention", s.get("flash_attn"),
      "| decode", t.get("decode_tps"), "t/s over", t.get("completion_tokens"), "tokens")' \
  | tee -a "$SUMMARY" || FAILED+=("chatapp ask (ask.log)")

# 5. decode and prefill with every layer offloaded, against llama-bench -ngl 99
T=$(date +%s)
"$CHATAPP" bench --ngl -1 --ctx 2048 --depth 1024 --reps "$REPS" --llama-bench "$BENCH" \
  >"$LOGS/bench.txt" 2>"$LOGS/bench.log" || FAILED+=("chatapp bench (bench.log)")
say "bench ($(elapsed "$T") s):"
tee -a "$SUMMARY" <"$LOGS/bench.txt"

# 6. an out-of-memory load: every layer on a GPU with LEAVE_GIB free and a context whose KV
#    cache is 1.4x that; the engine steps down to fewer GPU layers and says so
T=$(date +%s)
if [ "$CPU" = 1 ]; then
  CHATAPP_CACHE_DIR="$WORK/home/oom" "$VPY" scripts/gpu_oom.py stepdown 0.25 >"$LOGS/oom.txt" \
    2>"$LOGS/oom.log" || FAILED+=("out-of-memory load (oom.log)")
else
  "$VPY" scripts/gpu_oom.py hold "$LEAVE_GIB" >"$LOGS/hold.log" 2>&1 &
  HOLD=$!
  for _ in $(seq 60); do grep -q held "$LOGS/hold.log" 2>/dev/null && break; sleep 1; done
  say "hog: $(cat "$LOGS/hold.log")"
  CHATAPP_CACHE_DIR="$WORK/home/oom" "$VPY" scripts/gpu_oom.py stepdown "$LEAVE_GIB" \
    >"$LOGS/oom.txt" 2>"$LOGS/oom.log" || FAILED+=("out-of-memory load (oom.log)")
  kill "$HOLD" 2>/dev/null || true
  wait "$HOLD" 2>/dev/null || true
  grep -q '"stepped_down": true' "$LOGS/oom.txt" || FAILED+=("no GPU-layer step-down seen")
fi
say "out-of-memory load ($(elapsed "$T") s): $(cat "$LOGS/oom.txt")"

# 7. what `fit` sees of this machine's memory
"$CHATAPP" fit --json 2>>"$LOGS/fit.log" | "$VPY" -c 'import json, sys
f = json.load(sys.stdin)["fit"]
print("fit:", f["verdict"], "| gpu free", f["gpu_free_bytes"], "| gpu layers fit", f["gpu_layers_fit"])' \
  | tee -a "$SUMMARY" || FAILED+=("chatapp fit (fit.log)")

say "total: $(elapsed "$T0") s; ${#FAILED[@]} failed${FAILED[*]:+: ${FAILED[*]}}"
echo "--- summary ($SUMMARY)"
cat "$SUMMARY"
[ ${#FAILED[@]} = 0 ]
