"""The real TUI in a real terminal (tmux): after a bad model file or a worker killed mid-reply,
ctrl+q gives the shell back with the terminal as it was (echo and canonical mode on)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path

import pytest
from helpers import REPO

PROMPT = "re:(?m)^READY\\$$"  # the shell prompt, alone on the last line (tmux trims spaces)
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One shell in a detached tmux session on a private server socket (never the user's)."""

    def __init__(self, tmp_path: Path) -> None:
        self.socket = f"chatapp-faults-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp_path
        env = {
            "PYTHONPATH": str(REPO),
            "PYTHONDONTWRITEBYTECODE": "1",
            "CHATAPP_DATA_DIR": str(tmp_path / "data"),
            "CHATAPP_CONFIG_DIR": str(tmp_path / "config"),
            "CHATAPP_CACHE_DIR": str(tmp_path / "cache"),
            "CHATAPP_CONFIG": str(tmp_path / "config" / "config.toml"),
        }
        flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
        self.tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "40", *flags,
                  "bash --norc --noprofile --noediting")  # fmt: skip
        try:
            self.wait_for("re:(?m)[$#]$", timeout=10)
            self.line("PS1='READY$ '; clear")  # a prompt the tests can wait for
            self.wait_for(PROMPT, timeout=10)
        except BaseException:
            self.close()  # never leave a tmux server behind
            raise

    def tmux(self, *args: str) -> str:
        r = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def line(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)
        self.keys("Enter")

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen()
            if re.search(re.escape(pattern) if not pattern.startswith("re:") else pattern[3:],
                         shown):  # fmt: skip
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not on screen:\n{self.screen()}")

    def shell_pid(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", "t", "#{pane_pid}").strip())

    def terminal_modes(self, timeout: float = 20) -> str:
        """`stty -a` of the pane, run by the shell after the app has quit. The line ends with
        ctrl+j, so it is read even if the app left the terminal raw (no CR -> NL mapping)."""
        out = self.tmp / f"stty-{uuid.uuid4().hex[:6]}.txt"
        part = out.with_suffix(".part")
        q, qp = shlex.quote(str(out)), shlex.quote(str(part))
        self.tmux("send-keys", "-t", "t", "-l", f"stty -a > {qp} && mv {qp} {q}")
        self.keys("C-j")
        deadline = time.monotonic() + timeout
        while not out.exists():
            assert time.monotonic() < deadline, f"the shell did not run stty:\n{self.screen()}"
            time.sleep(0.05)
        return out.read_text()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        socket = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / self.socket
        socket.unlink(missing_ok=True)


def _children(pid: int) -> list[tuple[int, str]]:
    out = subprocess.run(
        ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True
    ).stdout
    return [(int(p), a) for p, a in (line.strip().split(None, 1) for line in out.splitlines())]


@pytest.fixture
def term(tmp_path):
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        for pid, _ in _descendants(t):  # the app and its worker, if a test failed midway
            _kill(pid)
        t.close()


def _descendants(t: Tmux) -> list[tuple[int, str]]:
    try:
        todo, found = [t.shell_pid()], []
    except AssertionError:
        return []
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += [p for p, _ in kids]
    return found


def _kill(pid: int) -> None:
    with suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _assert_sane(modes: str) -> None:
    flags = set(modes.split())
    assert {"echo", "icanon", "isig"} <= flags, modes
    assert not {"-echo", "-icanon", "-isig"} & flags, modes


def _chat(model: str) -> str:
    return f"{shlex.quote(sys.executable)} -m chatapp.cli chat {shlex.quote(model)} --ctx 512"


def test_bad_model_file_then_quit(term, tmp_path):
    bad = tmp_path / "bad model.gguf"
    bad.write_bytes(b"<!DOCTYPE html><html>404</html>")
    term.line(_chat(str(bad)))
    term.wait_for("probably a failed download")
    term.keys("h", "i")  # typing still works
    term.wait_for("hi")
    term.keys("C-q")
    shown = term.wait_for(PROMPT)
    assert "Traceback" not in shown
    _assert_sane(term.terminal_modes())


@pytest.mark.slow
def test_worker_killed_mid_reply_then_quit(term, model_path):
    term.line(_chat(model_path))
    term.wait_for("ready: ")
    term.line("Write a very long story about the sea, with many chapters.")
    term.wait_for("generating")
    app_pid = next(p for p, a in _children(term.shell_pid()) if "chatapp.cli" in a)
    worker = [p for p, a in _children(app_pid) if "spawn_main" in a]
    assert len(worker) == 1, _children(app_pid)
    os.kill(worker[0], signal.SIGKILL)
    term.wait_for("error: the model worker died while writing a reply")
    term.keys("C-q")
    shown = term.wait_for(PROMPT)
    assert "Traceback" not in shown
    _assert_sane(term.terminal_modes())


def test_the_check_sees_a_terminal_left_raw(term):
    """The harness itself: a program that exits leaving the terminal raw is caught (bash only
    restores the terminal after a job killed by a signal, not after a normal exit)."""
    term.line(f"{shlex.quote(sys.executable)} -c 'import tty; tty.setraw(0)'; echo")
    time.sleep(0.5)
    flags = set(term.terminal_modes().split())
    assert {"-echo", "-icanon"} <= flags


@pytest.mark.slow
def test_copy_reaches_tmux_with_set_clipboard_on(term, model_path):
    """OSC 52 through a real terminal: alt+c puts the reply in tmux's paste buffer."""
    term.tmux("set-option", "-g", "set-clipboard", "on")
    term.line(_chat(model_path) + " --no-autotune")
    term.wait_for("ready: ")
    term.line("Say hi in five words.")
    term.wait_for("done: ", timeout=120)
    term.keys("M-c")
    term.wait_for("copied the reply: ")
    buffer = term.tmux("show-buffer")
    assert buffer.strip() and buffer.strip().split()[0] in term.screen()
    term.keys("C-q")
    term.wait_for(PROMPT)


def _worker_of(term: Tmux, timeout: float = 60) -> tuple[int, int]:
    """(the app's pid, its model worker's pid), as soon as the worker is spawned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        apps = [p for p, a in _children(term.shell_pid()) if "chatapp.cli" in a]
        workers = [p for app in apps for p, a in _children(app) if "spawn_main" in a]
        if workers:
            return apps[0], workers[0]
        time.sleep(0.01)
    raise AssertionError(f"no model worker was spawned:\n{term.screen()}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("phase", ["loading", "tuning"])
def test_quit_ends_the_app_at_once_whatever_the_worker_does(term, model_path, phase):
    """A worker stopped midway (only SIGKILL reaches it: a load that never ends, a tune stuck
    in llama.cpp) does not keep the app alive after ctrl+q: it is killed, and the threads
    waiting on it end."""
    tune = "CHATAPP_AUTOTUNE=1 " if phase == "tuning" else ""
    term.line(tune + _chat(model_path) + ("" if tune else " --no-autotune"))
    app, worker = _worker_of(term)
    if phase == "tuning":
        term.wait_for("tuning for this machine")
    os.kill(worker, signal.SIGSTOP)  # a load: as if the file were huge or the disk slow
    term.wait_for("tuning for this machine" if tune else "loading the model")
    time.sleep(0.5)
    assert "ready: " not in term.screen() or tune, "the load was to be caught midway"
    quit_at = time.monotonic()
    term.keys("C-q")
    shown = term.wait_for(PROMPT, timeout=30)
    took = time.monotonic() - quit_at
    print(f"quit while {phase}: the shell prompt was back {took:.2f} s after ctrl+q")
    assert "Traceback" not in shown
    assert _gone(app) and _gone(worker)
    _assert_sane(term.terminal_modes())
