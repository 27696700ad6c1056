"""Stand-ins for llama.cpp's reference programs, written as executables into a folder: a
llama-bench that answers, a llama-server (fakes/llama_server.py), and ones that fail: exiting
with an error after a line on stderr, or printing something that is not their output."""

from __future__ import annotations

import sys
from pathlib import Path

SERVER = Path(__file__).parent / "llama_server.py"


def _program(folder: Path, name: str, python: str) -> Path:
    exe = folder / name
    exe.write_text(f"#!{sys.executable}\n{python}", encoding="utf-8")
    exe.chmod(0o755)
    return exe


def llama_bench(folder: Path, avg_ts: float = 50.0) -> Path:
    """Answers --help, and every run with one result of avg_ts tokens/s, as `-o json` does."""
    return _program(
        folder,
        "llama-bench",
        f"import sys\nprint('[{{\"avg_ts\": {avg_ts}}}]' if '--help' not in sys.argv else 'usage')\n",
    )


def llama_server(folder: Path) -> Path:
    run = f"import runpy\nrunpy.run_path({str(SERVER)!r}, run_name='__main__')\n"
    return _program(folder, "llama-server", run)


def failing(folder: Path, name: str, last: str = "error: failed to load model") -> Path:
    """Answers --help (so it passes the check made before anything loads), then every run
    prints `last` on stderr and exits 1."""
    return _program(
        folder,
        name,
        "import sys\nif '--help' in sys.argv:\n    print('usage')\n    raise SystemExit(0)\n"
        f"print('loading', file=sys.stderr)\nprint({last!r}, file=sys.stderr)\nraise SystemExit(1)\n",
    )


def garbage(folder: Path, name: str, text: str = "<html>hello from another program</html>") -> Path:
    """Answers --help, then prints `text` where its output should be and exits 0."""
    return _program(
        folder,
        name,
        "import sys\nif '--help' in sys.argv:\n    print('usage')\n    raise SystemExit(0)\n"
        f"print('some line')\nprint({text!r})\n",
    )
