#!/usr/bin/env bash
# Check the dependency floors: install chatapp into a fresh venv with every dependency at the
# lowest version pyproject.toml allows (constraints/floors.txt), then run the fast tests.
#
#   scripts/check_floors.sh            # venv in a temporary folder, removed afterwards
#   FLOORS_VENV=/tmp/floors scripts/check_floors.sh   # keep (and reuse) the venv
#   scripts/check_floors.sh --dry-run  # only resolve the floors with pip (no install, no tests)
#
# llama-cpp-python compiles from source on the first install (about 10 minutes on 2 cores;
# pip's wheel cache makes later runs fast). Needs python3 >= 3.11 and the package index.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
venv="${FLOORS_VENV:-}"
if [[ -z "$venv" ]]; then
    venv="$(mktemp -d)/floors-venv"
    trap 'rm -rf "$(dirname "$venv")"' EXIT
fi
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
if [[ "${1:-}" == "--dry-run" ]]; then
    "$venv/bin/python" -m pip install --dry-run -e "$root[test]" -c "$root/constraints/floors.txt"
    exit
fi
"$venv/bin/python" -m pip install -e "$root[test]" -c "$root/constraints/floors.txt"
cd "$root"
"$venv/bin/python" -m pytest -m "not slow" -x -q
