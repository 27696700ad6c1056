"""What the tests share: Pilot waits and keys, the CLI in a subprocess, the fake engines other
than the scripted one (scripted_engine.py), and the real chat templates' data."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scripted_engine import ScriptedEngine
from textual.app import App
from textual.widgets import Static

from chatapp.engine.protocol import (
    Candidate,
    ChatMessage,
    EngineError,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    PromptEvaluated,
    StopReason,
    Token,
    TokenPiece,
)
from chatapp.metrics import GenerationStats, stats_from_times
from chatapp.models.bundled import smollm2_path
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


def one_error_line(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one `error: ...` line of a failed command (no traceback, nothing else), unprefixed."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    return lines[0].removeprefix("error: ")


# ---- fake engines (the scripted one is scripted_engine.py) ----------------------------------


class FakeEngine:
    """Stands in for LocalEngine: fixed replies and log-probs, chosen by the file's name."""

    vocab = 16

    def __init__(self, opts):
        self.path = opts.model_path
        self.pid = os.getpid()

    def start(self):
        if "broken" in self.path:
            raise EngineError(f"could not load {self.path}")
        return ModelInfo(self.path, self.vocab, 1024, 2048, 0.01, False, 0, 1, 1, True)

    def generate(self, request):
        n = request.settings.max_tokens
        for i in range(n):
            yield Token(i, 3 if "noisy" in self.path and i > 1 else 1, b"a", "a", float(i))
        stats = GenerationStats(10, 10, n, 0.1, 0.05, 0.2, 10 + n, 1024)
        yield Finished(StopReason.MAX_TOKENS, "a" * n, stats)

    def tokenize(self, text, special=True):
        shift = 1 if "othertok" in self.path else 0
        return [TokenPiece((i + shift) % self.vocab, b"x") for i in range(40)]

    def score(self, tokens):
        rng = np.random.default_rng(7)
        logits = rng.normal(size=(len(tokens) - 1, self.vocab))
        if "noisy" in self.path:
            logits += np.random.default_rng(8).normal(scale=2.0, size=logits.shape)
        return (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).astype(np.float32)

    def close(self):
        pass


class BrokenEngine:
    """An engine whose model never loads (a file llama.cpp refuses after the header check)."""

    pid = None

    def __init__(self, opts: LoadOptions) -> None:
        self.opts = opts

    def start(self):
        raise EngineError(f"could not load {self.opts.model_path}: llama.cpp refused it")

    def close(self) -> None:
        pass


# What a model (or a server's JSON) may emit, and what a user may paste: each must be shown as
# visible symbols, never reach the terminal raw.
HOSTILE = [
    "\x1b[31mred\x1b[0m",  # SGR colour
    "\x1b]0;pwned\x07",  # OSC: set the window title
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "nul\x00byte",
    "bell\x07",
    "\x9b31mC1",  # 8-bit CSI
    "lone\ud800surrogate",  # from JSON "\ud800", or argv that is not UTF-8
    "back\x08space",
    "carriage\rreturn",
    "del\x7f",
]


class HostileEngine(ScriptedEngine):
    """Replies with the HOSTILE words, one token each."""

    def generate(self, request: GenerateRequest):
        self.requests.append(request)
        t0 = time.perf_counter()
        yield PromptEvaluated(
            (TokenPiece(1, b"\x1b[2J"), TokenPiece(2, b"user")), "", 2, 0, 0.001, t0
        )
        times, parts = [], []
        for n, word in enumerate(HOSTILE):
            piece = (" " + word).encode("utf-8", "surrogatepass")
            cand = Candidate(n, piece, 0.5, 0.6)
            times.append(time.perf_counter())
            parts.append(" " + word)
            yield Token(n, n, piece, " " + word, times[-1], -0.69, (cand,))
        stats = stats_from_times(
            t_request=t0, t_prefill_start=t0, t_prefill_end=t0 + 0.001, token_times=times,
            prompt_tokens=2, prompt_evaluated=2, n_past=2 + len(times), n_ctx=2048,
        )  # fmt: skip
        yield Finished(StopReason.EOG, "".join(parts), stats)


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
