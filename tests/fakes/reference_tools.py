"""Stand-ins for llama.cpp's reference programs, written as executables into a folder: a
llama-bench that answers, a llama-server (fakes/llama_server.py), and ones that fail: exiting
with an error after a line on stderr, or printing something that is not their output."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

SERVER = Path(__file__).parent / "llama_server.py"


def _program(folder: Path, name: str, python: str) -> Path:
    exe = folder / name
    exe.write_text(f"#!{sys.executable}\n{python}", encoding="utf-8")
    exe.chmod(0o755)
    return exe


def _shell(folder: Path, name: str, script: str) -> Path:
    """A /bin/sh program (starts in a few ms, where Python takes a second on a loaded box)."""
    exe = folder / name
    exe.write_text(f"#!/bin/sh\n{script}", encoding="utf-8")
    exe.chmod(0o755)
    return exe


def llama_bench(folder: Path, avg_ts: float = 50.0) -> Path:
    """Answers --help, and every run with one result of avg_ts tokens/s, as `-o json` does."""
    return _shell(
        folder,
        "llama-bench",
        f'case "$*" in *--help*) echo usage; exit 0;; esac\necho \'[{{"avg_ts": {avg_ts}}}]\'\n',
    )


def llama_server(folder: Path) -> Path:
    run = f"import runpy\nrunpy.run_path({str(SERVER)!r}, run_name='__main__')\n"
    return _program(folder, "llama-server", run)


def failing(folder: Path, name: str, last: str = "error: failed to load model") -> Path:
    """Answers --help (so it passes the check made before anything loads), then every run
    prints `last` on stderr and exits 1."""
    return _shell(
        folder,
        name,
        'case "$*" in *--help*) echo usage; exit 0;; esac\n'
        f"echo loading >&2\necho {shlex.quote(last)} >&2\nexit 1\n",
    )


def garbage(folder: Path, name: str, text: str = "<html>hello from another program</html>") -> Path:
    """Answers --help, then prints `text` where its output should be and exits 0."""
    return _shell(
        folder,
        name,
        'case "$*" in *--help*) echo usage; exit 0;; esac\n'
        f"echo 'some line'\necho {shlex.quote(text)}\n",
    )
