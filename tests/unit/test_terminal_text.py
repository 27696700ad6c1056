"""Text from a model, a file or the history reaches a terminal with its control sequences made
visible (none can set the window title, write the clipboard or clear the screen); a pipe or a
file gets it byte for byte."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from fakes.engines import ScriptedEngine
from helpers import REPO, run_cli

from chatapp.commands import ask
from chatapp.engine.protocol import LoadOptions
from chatapp.history.store import Store
from chatapp.sampling import SamplerSettings
from chatapp.textsafe import for_stream, for_terminal

TITLE = "\x1b]0;pwned\x07"  # OSC 0: sets the window title
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: writes the clipboard
CLEAR = "\x1b[2J"  # CSI: clears the screen
CSI_C1 = "\x9b31m"  # the one-character CSI (C1)
HOSTILE = f"a{TITLE}b{CLIPBOARD}c{CLEAR}d{CSI_C1}e\x00f\tg\nh"


class Terminal(io.StringIO):
    """A stream that says it is a terminal, keeping each write apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def no_controls(text: str) -> bool:
    """True when nothing in `text` but newlines and tabs is a control character."""
    return not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in text)


def test_for_terminal_keeps_lines_and_tabs_and_shows_the_rest():
    shown = for_terminal(HOSTILE + "\r\n")
    assert no_controls(shown)
    assert shown == "a␛]0;pwned␇b␛]52;c;cm0gLXJmIH4K␇c␛[2Jd\\x9b31me␀f\tg\nh\n"


def test_for_stream_is_for_terminal_on_a_terminal_and_nothing_into_a_pipe(tmp_path):
    assert for_stream(Terminal())(HOSTILE) == for_terminal(HOSTILE)
    assert for_stream(io.StringIO())(HOSTILE) == HOSTILE
    master, slave = os.openpty()
    with open(slave, "w") as tty, open(tmp_path / "file", "w") as file:
        assert for_stream(tty) is for_terminal
        assert for_stream(file)(HOSTILE) == HOSTILE
    os.close(master)


# ---- ask: streamed tokens -------------------------------------------------------------------

WORDS = [TITLE, "[/]", CLIPBOARD, "plain", CLEAR + CSI_C1]


def ask_into(out, monkeypatch) -> str:
    """`chatapp ask` on a scripted engine whose reply carries escape sequences, into `out`."""
    monkeypatch.setattr(ask, "make_engine", lambda *a, **kw: ScriptedEngine(words=WORDS))
    monkeypatch.setattr(sys, "stdout", out)
    settings = SamplerSettings(max_tokens=64)
    code = ask.run_ask(
        "hi", LoadOptions("scripted.gguf"), settings, system=None, stop=[], as_json=False
    )
    assert code == 0
    return "".join(" " + w for w in WORDS * 2)  # the reply as the engine wrote it


def test_ask_streams_each_token_to_a_terminal_with_its_controls_visible(monkeypatch):
    tty = Terminal()
    reply = ask_into(tty, monkeypatch)
    assert tty.getvalue() == for_terminal(reply) + "\n"
    assert no_controls(tty.getvalue())
    assert len(tty.writes) == 2 * len(WORDS) + 1, "one write per token (it streams), then \\n"


def test_ask_into_a_pipe_writes_the_reply_byte_for_byte(monkeypatch):
    pipe = io.StringIO()
    reply = ask_into(pipe, monkeypatch)
    assert pipe.getvalue() == reply + "\n"


# ---- history: show, list and export -----------------------------------------------------------


@pytest.fixture
def hostile_chat(fresh_dirs) -> int:
    with Store() as store:
        cid = store.create_conversation(f"title {TITLE}", system_prompt=f"sys {CLEAR}")
        store.add_message(cid, "user", f"see {CLIPBOARD} here")
        rid = store.begin_reply(cid)
        store.finish_reply(rid, f"reply {CLEAR}{CSI_C1} done")
        return cid


def on_a_terminal(*args: str) -> bytes:
    """`python -m chatapp.cli ARGS` with stdout and stderr on a pseudo-terminal: what it wrote."""
    master, slave = os.openpty()
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "chatapp.cli", *args],
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=REPO,
    )  # fmt: skip
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=120) == 0, out
    os.close(master)
    return out


@pytest.mark.parametrize(
    "args",
    [
        ("history", "show"),
        ("history", "list"),
        ("history", "export"),
        ("history", "export", "-f", "json"),
    ],
)
def test_history_on_a_terminal_shows_escapes_as_symbols(hostile_chat, args):
    cid = [str(hostile_chat)] if args[1] != "list" else []
    out = on_a_terminal(*args[:2], *cid, *args[2:]).decode()
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, out
    assert "␛]0;pwned" in out or "\\u001b]0;pwned" in out  # the title is there, shown


def test_history_into_a_pipe_is_byte_for_byte(hostile_chat):
    show = run_cli("history", "show", str(hostile_chat))
    assert show.returncode == 0, show.stderr
    assert f"#{hostile_chat} title {TITLE}" in show.stdout
    assert f"see {CLIPBOARD} here" in show.stdout and f"reply {CLEAR}{CSI_C1} done" in show.stdout
    export = run_cli("history", "export", str(hostile_chat))
    assert f"# title {TITLE}\n" in export.stdout and f"reply {CLEAR}{CSI_C1} done" in export.stdout
