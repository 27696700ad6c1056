"""The files a token crosses, found by running one: the real model streams a reply into the
real app while a profiler notes every chatapp function that is handed, holds or returns a
token (or the batch that carries them, or the reply that stores them); docs/architecture.md
must list exactly those files."""

from __future__ import annotations

import ast
import re
import signal
import sys
import threading
from pathlib import Path

import pytest
from helpers import pane, submit, wait_until

from chatapp.chat.live_reply import LiveReply
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions, Token
from chatapp.ui.app import ChatApp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chatapp"


def _carries(value: object) -> bool:
    if isinstance(value, Token | LiveReply):
        return True
    if isinstance(value, list | tuple) and value and isinstance(value[0], Token):
        return True
    return type(value).__name__ in ("TokensArrived", "Events")  # (the pipe's batch of events)


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
async def test_the_documented_path_is_the_files_a_token_crosses(model_path, fresh_dirs):
    crossed: set[str] = set()

    package = str(PACKAGE)

    def profile(frame, event, arg):
        # chatapp's own frames only: other code's locals are never read (a proxy's isinstance
        # or truth test could run anything)
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(package):
            return
        held = [*frame.f_locals.values(), arg if event == "return" else None]
        if any(map(_carries, held)):
            crossed.add(str(Path(frame.f_code.co_filename).relative_to(PACKAGE)))

    options = LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)

    def too_long(_signum, _frame):
        raise TimeoutError("the traced reply took over 5 minutes")

    signal.signal(signal.SIGALRM, too_long)  # (a profiled process must never hang the suite)
    signal.alarm(300)
    threading.setprofile(profile)  # (threads started from now: the one a reply is read in)
    sys.setprofile(profile)
    try:
        app = ChatApp(lambda: LocalEngine(options), config=Config(autotune=False))
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.slot.engine is not None, 120)
            crossed.clear()
            await submit(pilot, app, "Name three colours.")
            await wait_until(
                pilot, lambda: pane(app).last_reply is not None and pane(app).reply is None, 120
            )
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    worker = {f"engine/local/loop/{name}" for name in _worker_files()}
    assert worker == {"engine/local/loop/token_step.py", "engine/local/loop/reply_loop.py"}
    assert "engine/local/process/local_engine.py" in crossed  # (the trace saw the pipe's end)
    assert sorted(_documented()) == sorted(worker | crossed)
