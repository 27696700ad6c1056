"""The files a token crosses, found by running one (trace_token_path.py: the real model streams
a reply into the real app while a profiler notes every chatapp function that is handed, holds
or returns a token); docs/architecture.md must list exactly those files."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chatapp"


def _worker_files() -> set[str]:
    """The model process's side, from the code: the module that makes each Token event, and
    the one whose `send` puts events on the pipe."""
    found = set()
    for path in (PACKAGE / "engine" / "local" / "loop").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            makes = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Token"
            sends = isinstance(node, ast.FunctionDef) and node.name == "send"
            if makes or sends:
                found.add(path.name)
    return found


def _documented() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## A token's path", 1)[1].split("\n## ", 1)[0]
    listed = section.split("fails when this list differs):", 1)[1].split(".\n", 1)[0]
    return re.findall(r"`([\w/]+\.py)`", listed)


@pytest.mark.slow
def test_the_documented_path_is_the_files_a_token_crosses(model_path, fresh_dirs):
    # (in a process of its own: a profiler in the suite's process, after hundreds of tests,
    # hung at its first call; a fresh process gives the same trace every time, and a timeout)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("trace_token_path.py")), model_path],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CHATAPP_AUTOTUNE": "0"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    crossed = set(json.loads(done.stdout.strip().splitlines()[-1]))
    worker = {f"engine/local/loop/{name}" for name in _worker_files()}
    assert worker == {"engine/local/loop/token_step.py", "engine/local/loop/reply_loop.py"}
    assert "engine/local/process/local_engine.py" in crossed  # (the trace saw the pipe's end)
    assert sorted(_documented()) == sorted(worker | crossed)
