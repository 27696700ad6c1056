"""What the tests share: Pilot waits and keys, the CLI in a subprocess, and the real chat
templates' data (the fake engines are in fakes/engines.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from textual.app import App
from textual.widgets import Static

from chatapp.engine.protocol import (
    ChatMessage,
    LoadOptions,
)
from chatapp.models.bundled import smollm2_path
from chatapp.ui.app import ChatApp
from chatapp.ui.themes import PANEL_DEFAULTS

SIZE = (120, 40)  # the terminal of the Pilot tests
REPO = Path(__file__).resolve().parents[1]


# ---- Pilot ----------------------------------------------------------------------------------


async def wait_until(pilot, predicate, timeout: float = 20.0) -> None:
    """Let the app run until `predicate()` holds; fail after `timeout` seconds of wall time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout:g} s")
        await pilot.pause(0.02)


async def submit(pilot, app, text: str, load_timeout: float = 60.0) -> None:
    """Put text in the prompt and press Enter once a model is loaded."""
    await wait_until(pilot, lambda: app.slot.engine is not None, timeout=load_timeout)
    prompt = app.query_one("#prompt")
    prompt.text = text
    prompt.focus()
    await pilot.press("enter")


async def send(pilot, app, text: str) -> None:
    """Submit text and wait until its reply has begun (or already ended)."""
    await submit(pilot, app, text, load_timeout=20.0)
    await wait_until(pilot, lambda: pane(app).reply is not None or pane(app).last_reply is not None)


async def type_text(pilot, app, text: str) -> None:
    """Type into the prompt key by key, as a user does."""
    prompt = app.query_one("#prompt")
    prompt.focus()
    await pilot.press(*text)


def status(app) -> str:
    return str(app.query_one("#status-line").render())


def text_of(widget: Static) -> str:
    return str(widget.render())


def screen_text(app) -> str:
    """Everything on the screen, as the terminal would get it (one string per line)."""
    strips = app.screen._compositor.render_full_update().strips
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


class Host(App):
    """A bare app that opens one screen and keeps what it dismisses with."""

    def __init__(self, screen) -> None:
        super().__init__()
        self.first = screen
        self.results: list[object] = []

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(PANEL_DEFAULTS)

    def on_mount(self) -> None:
        self.push_screen(self.first, self.results.append)


def bundled() -> str:
    return str(smollm2_path())


# ---- the CLI --------------------------------------------------------------------------------

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
    *args: str, timeout: float = 120, deny: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`python -m chatapp.cli ARGS` from this checkout, with the test session's CHATAPP_* dirs."""
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


# A shell without job control starts its `&` jobs with SIGINT ignored (a script's or `bash -c`'s
# `cmd &`, a CI runner, a suite run in the background) and Python keeps it ignored: put before a
# command, this starts it so whatever started the tests.
SIGINT_IGNORED = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]


def one_error_line(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one `error: ...` line of a failed command (no traceback, nothing else), unprefixed."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    return lines[0].removeprefix("error: ")


# ---- the real chat templates (tests/data/templates) -----------------------------------------

TEMPLATES = Path(__file__).parent / "data" / "templates"

CHAT = (
    ChatMessage("system", "You are a terse pirate."),
    ChatMessage("user", "First question?"),
    ChatMessage("assistant", "First answer."),
    ChatMessage("user", "Second question?"),
)

# Each template's generation prompt: what the rendered prompt ends with.
GENERATION_PROMPT = {
    "command-r-plus": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    "command-r7b": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>",
    "deepseek-r1-distill-llama": "<｜Assistant｜><think>\n",
    "deepseek-r1-distill-qwen": "<｜Assistant｜><think>\n</think>",
    "firefunction-v2": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma2": "<start_of_turn>model\n",
    "gemma4": "<|turn>model\n<|channel>thought\n<channel|>",
    "gpt-oss": "<|start|>assistant",
    "granite3.3": "<|start_of_role|>assistant<|end_of_role|>",
    "lfm2": "<|im_start|>assistant\n",
    "lfm2.5": "<|im_start|>assistant\n",
    "llama3.1": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "llama3.2": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "mistral-nemo": "[/INST]",
    "mistral-small3.2": "[/INST]",
    "phi3.5": "<|assistant|>\n",
    "phi4": "<|im_start|>assistant<|im_sep|>",
    "qwen2.5": "<|im_start|>assistant\n",
    "qwen3": "<|im_start|>assistant\n",
    "smollm3": "<|im_start|>assistant\n",
}


def pane(app):
    """The chat's ConversationPane: the conversation, its session and the live reply."""
    return app.chat_screen.pane


def chat_app() -> ChatApp:
    """The chat on the scripted engine, with the bundled model's path as its file."""
    from fakes.engines import ScriptedEngine

    return ChatApp(lambda: ScriptedEngine(), options=LoadOptions(model_path=str(smollm2_path())))


def steer_status(panel) -> str:
    """The Steer tab's status line."""
    return str(panel.query_one("#steer-status").render())


async def add_steering(pilot, app, name: str):
    """Pick `name` in the Steer tab and press Add (a built-in pair is made in a worker)."""
    from textual.widgets import Select

    from chatapp.ui.widgets.steer_panel import SteerPanel

    await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
    await pilot.press("alt+v")
    panel = app.query_one(SteerPanel)
    await wait_until(pilot, lambda: bool(panel.query("#steer-choice")))
    panel.query_one("#steer-choice", Select).value = name
    await pilot.click("#steer-add")
    return panel
