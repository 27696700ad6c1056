"""The real TUI in a real terminal (tmux) against `chatapp ask`: same greedy reply, alternating."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from chatapp.engine.protocol import LoadOptions
from chatapp.metrics import median

PROMPT = "Tell me a long story about a lighthouse keeper who finds a message in a bottle."
SIZE = (160, 45)


@dataclass
class Pair:
    """One repetition: the TUI's reply and `chatapp ask`'s, back to back."""

    tui_decode_tps: float
    ask_decode_tps: float
    tui_tokens: int
    ask_tokens: int
    tui_cpu_s: float  # CPU seconds the UI process used during its reply (not the model worker)


class TerminalBench:
    """`chatapp chat` in a detached tmux session on a private socket, plus `chatapp ask` runs
    that read the same config (greedy, fixed length), in the same directories."""

    def __init__(
        self,
        options: LoadOptions,
        tokens: int,
        tui_env: dict | None = None,
        size: tuple[int, int] = SIZE,
    ) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux is not installed; the terminal benchmark needs it")
        self.options = options
        self.tokens = tokens
        self.size = size
        self.root = Path(tempfile.mkdtemp(prefix="chatapp-tbench-"))
        self.socket = f"chatapp-bench-{uuid.uuid4().hex[:8]}"
        self.env = {
            "CHATAPP_DATA_DIR": str(self.root / "data"),
            "CHATAPP_CONFIG_DIR": str(self.root / "config"),
            "CHATAPP_CACHE_DIR": os.environ.get("CHATAPP_CACHE_DIR", str(self.root / "cache")),
            "CHATAPP_CONFIG": str(self.root / "config" / "config.toml"),
        }
        config = Path(self.env["CHATAPP_CONFIG"])
        config.parent.mkdir(parents=True)
        config.write_text(
            f"n_ctx = {options.n_ctx}\nn_gpu_layers = {options.n_gpu_layers}\n"
            + (f"threads = {options.n_threads}\n" if options.n_threads else "")
            + ("" if options.flash_attn is None else f"flash_attn = {_toml(options.flash_attn)}\n")
            + ("" if options.repack is None else f"repack = {_toml(options.repack)}\n")
            + f"[sampler]\ntemperature = 0.0\nmax_tokens = {tokens}\n",
            encoding="utf-8",
        )
        self.cli = [sys.executable, "-m", "chatapp.cli"]
        self.tui_env = tui_env or {}

    # ---- tmux ---------------------------------------------------------------------------

    def tmux(self, *args: str) -> str:
        r = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        if r.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {r.stderr.strip()}")
        return r.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b")

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.screen():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{text!r} did not appear in the TUI:\n{self.screen()}")

    def open(self) -> None:
        flags = [
            x for k, v in {**self.env, "TERM": "xterm-256color"}.items() for x in ("-e", f"{k}={v}")
        ]
        cmd = " ".join([*self.cli, "chat", self.options.model_path, "--no-autotune"])
        self.tmux("new-session", "-d", "-s", "b", "-x", str(self.size[0]), "-y", str(self.size[1]),
                  *flags, cmd)  # fmt: skip
        self.wait_for("ready:", timeout=120)
        self.ui_pid = int(self.tmux("display-message", "-p", "-t", "b", "#{pane_pid}").strip())

    def close(self) -> None:
        try:
            self.tmux("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- one reply each -----------------------------------------------------------------

    def _replies_done(self) -> int:
        db = Path(self.env["CHATAPP_DATA_DIR"]) / "history.db"
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM messages WHERE role = 'assistant' AND status != "
                    "'streaming' AND decode_tps IS NOT NULL"
                ).fetchone()
        except sqlite3.Error:
            return 0
        return int(row[0])

    def _last_reply(self) -> tuple[float, int]:
        db = Path(self.env["CHATAPP_DATA_DIR"]) / "history.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT decode_tps, completion_tokens FROM messages WHERE role = 'assistant' "
                "AND decode_tps IS NOT NULL ORDER BY id DESC LIMIT 1"
            ).fetchone()
        return float(row[0]), int(row[1])

    def tui_reply(self) -> tuple[float, int, float]:
        done = self._replies_done()
        self.tmux("send-keys", "-t", "b", "C-n")  # a new chat: every reply starts the same way
        time.sleep(0.3)
        cpu0 = _cpu_seconds(self.ui_pid)
        self.tmux("send-keys", "-t", "b", "-l", PROMPT)
        self.tmux("send-keys", "-t", "b", "Enter")
        deadline = time.monotonic() + 300
        while self._replies_done() <= done:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the TUI's reply did not finish:\n{self.screen()}")
            time.sleep(0.5)  # (each look opens the database: the model would pay for it too)
        cpu = _cpu_seconds(self.ui_pid) - cpu0
        decode, n = self._last_reply()
        return decode, n, cpu

    def ask_reply(self) -> tuple[float, int]:
        r = subprocess.run(
            [*self.cli, "ask", PROMPT, "--json", "--model", self.options.model_path],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **self.env},
        )
        if r.returncode != 0:
            raise RuntimeError(f"chatapp ask failed: {r.stderr.strip()[-300:]}")
        data = json.loads(r.stdout)
        return float(data["decode_tps"]), int(data["completion_tokens"])

    def run(self, reps: int, progress=lambda text: None) -> list[Pair]:
        pairs = []
        self.tui_reply()  # warm-up of both sides: page cache, first renders
        self.ask_reply()
        for rep in range(reps):
            tui, tui_n, cpu = self.tui_reply()
            ask, ask_n = self.ask_reply()
            pairs.append(Pair(tui, ask, tui_n, ask_n, cpu))
            progress(f"rep {rep + 1}/{reps}: TUI {tui:.1f} t/s ({tui_n} tok), ask {ask:.1f} t/s")
        return pairs


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process (not its children: the model worker is not counted)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def _toml(value: bool) -> str:
    return "true" if value else "false"


def run_terminal_bench(
    options: LoadOptions, tokens: int, reps: int, size: tuple[int, int] = SIZE
) -> dict:
    bench = TerminalBench(options, tokens, size=size)
    try:
        bench.open()
        pairs = bench.run(reps, progress=lambda t: print(t, file=sys.stderr))
    finally:
        bench.close()
    return {
        "tokens": tokens,
        "reps": reps,
        "size": f"{size[0]}x{size[1]}",
        "tui_over_ask_decode": median([p.tui_decode_tps / p.ask_decode_tps for p in pairs]),
        "tui_decode_tps": median([p.tui_decode_tps for p in pairs]),
        "ask_decode_tps": median([p.ask_decode_tps for p in pairs]),
        "ui_cpu_share": median(
            [p.tui_cpu_s * p.tui_decode_tps / max(p.tui_tokens, 1) for p in pairs]
        ),
        "pairs": [p.__dict__ for p in pairs],
    }


def print_terminal_bench(
    options: LoadOptions, tokens: int, reps: int, as_json: bool, size: tuple[int, int] = SIZE
) -> int:
    report = run_terminal_bench(options, tokens, reps, size)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_terminal_report(report)
    return 0


def print_terminal_report(report: dict) -> None:
    tokens, reps = report["tokens"], report["reps"]
    print(
        f"TUI under tmux at {report['size']} vs chatapp ask: {tokens} greedy tokens, "
        f"median of {reps} pairs"
    )
    print(f"  TUI decode / ask decode   {report['tui_over_ask_decode']:.3f}x (goal >= 0.95)")
    print(f"  TUI {report['tui_decode_tps']:.1f} t/s, ask {report['ask_decode_tps']:.1f} t/s")
    print(f"  UI process CPU while streaming: {report['ui_cpu_share']:.0%} of a core")
