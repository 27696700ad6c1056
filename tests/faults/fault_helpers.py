"""Shared pieces of the fault tests: the CLI in a subprocess, Pilot waits, rendered text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SIZE = (120, 40)
REPO = Path(__file__).resolve().parents[2]

# Runs `chatapp` with open() refusing one path, as a mode-000 file does for a non-root user
# (the tests run as root, who reads any file whatever its mode).
_DENY_MAIN = """
import builtins, io, os, sys
target = os.environ["CHATAPP_TEST_DENY"]
real_open = io.open
def deny(file, *args, **kwargs):
    if isinstance(file, str | os.PathLike) and os.fspath(file) == target:
        raise PermissionError(13, "Permission denied", target)
    return real_open(file, *args, **kwargs)
builtins.open = io.open = deny
sys.argv[0] = "chatapp"
from chatapp.cli import main
main()
"""


def run_cli(
    *args: str, timeout: float = 60, deny: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`python -m chatapp.cli ARGS` with the test session's CHATAPP_* dirs."""
    full_env = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), full_env.get("PYTHONPATH", "")) if p
    )
    if deny is not None:
        full_env["CHATAPP_TEST_DENY"] = str(deny)
        cmd = [sys.executable, "-c", _DENY_MAIN, *args]
    else:
        cmd = [sys.executable, "-m", "chatapp.cli", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO
    )


def one_error_line(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one `error: ...` line of a failed command (no traceback, nothing else), unprefixed."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    return lines[0].removeprefix("error: ")


async def wait_until(pilot, predicate, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


def status(app) -> str:
    return str(app.query_one("#status-line").render())


async def type_text(pilot, app, text: str) -> None:
    """Type into the prompt key by key, as a user does."""
    prompt = app.query_one("#prompt")
    prompt.focus()
    await pilot.press(*text)


async def send(pilot, app, text: str) -> None:
    """Put text in the prompt and press Enter once a model is loaded."""
    await wait_until(pilot, lambda: app.engine is not None, timeout=60)
    prompt = app.query_one("#prompt")
    prompt.text = text
    prompt.focus()
    await pilot.press("enter")


def screen_text(app) -> str:
    """Everything on the screen, as the terminal would get it (one string per line)."""
    strips = app.screen._compositor.render_full_update().strips
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)
