"""The layering: import-linter's contracts (pyproject.toml), and llama.cpp only in the worker."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    r = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_the_parent_process_never_loads_llama_cpp():
    # Static contracts cannot see this one: llama.cpp is imported inside the worker's process
    # only, so a crash in it never takes the UI or a command down.
    code = (
        "import sys, chatapp.cli, chatapp.ui.app, chatapp.commands.ask, "
        "chatapp.commands.bench.speed, "
        "chatapp.models.compare, chatapp.models.quantize, "
        "chatapp.engine.local.process.local_engine, "
        "chatapp.engine.remote.client\n"
        "assert 'llama_cpp' not in sys.modules, 'the parent must not load llama.cpp'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)
