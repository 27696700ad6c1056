"""The benches' reference programs (llama-bench, llama-server): checked before any model loads,
and each way they fail (missing, an exit that is not 0, output that is not theirs) one sentence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from chatapp.errors import ChatappError

QUOTE_CHARS = 160  # of the tool's last line, quoted in the sentence
PROBE_S = 60  # for `TOOL --help` (a GPU build may look for its devices first)


class ToolError(ChatappError):
    """A reference program is missing, ended with an error, or printed something that is not
    its result: the sentence names the program and the last line it printed."""


def check_tool(name: str, path: Path | None, probe: bool = True) -> None:
    """Refuse a path that is not a program this user may run, before any model loads; with
    `probe`, also one whose `--help` fails (llama.cpp's programs print their usage and exit 0),
    so a wrong program is named in a second, not after the models have loaded."""
    if path is None:
        return
    p = Path(path)
    if not p.exists():
        raise ToolError(f"{name} not found at {p}: give the path of llama.cpp's {name}")
    if not p.is_file():
        raise ToolError(f"{name} at {p} is not a file: give the path of llama.cpp's {name}")
    if not os.access(p, os.X_OK):
        raise ToolError(f"{name} at {p} is not executable: chmod +x it, or give another path")
    if probe:
        when = f" on --help (is {p} llama.cpp's {name}?)"
        run_tool(name, [str(p), "--help"], timeout=PROBE_S, when=when)


def last_line(*texts: str | bytes | None) -> str:
    """The last non-blank line of the first text that has one (e.g. stderr, then stdout),
    shortened and quoted; "nothing" when every text is empty."""
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            line = lines[-1]
            if len(line) > QUOTE_CHARS:
                line = line[: QUOTE_CHARS - 3] + "..."
            return repr(line)
    return "nothing"


def exited(name: str, code: int, said: str, when: str = "") -> ToolError:
    """The error for a program that ended with `code`; `said` is last_line() of its output."""
    return ToolError(f"{name} exited with code {code}{when}; the last line it printed: {said}")


def printed_garbage(name: str, said: str, wanted: str) -> ToolError:
    return ToolError(f"{name} printed no {wanted}; the last line it printed: {said}")


def run_tool(
    name: str, cmd: list[str], timeout: float, when: str = ""
) -> subprocess.CompletedProcess:
    """Run a reference program to its end; a start that fails, a timeout or an exit code above
    0 is a ToolError (a negative code, a signal, is left to the caller: llama-bench's own
    configuration may crash, a result of the benchmark)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except OSError as exc:  # (not executable, a bad interpreter line, ...)
        raise ToolError(f"{name} could not be started ({exc.strerror or exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolError(
            f"{name} did not finish within {timeout:.0f} s; the last line it printed: "
            f"{last_line(exc.stderr, exc.stdout)}"
        ) from exc
    if done.returncode > 0:
        raise exited(name, done.returncode, last_line(done.stderr, done.stdout), when)
    return done


def log_last_line(path: str | Path) -> str:
    """last_line() of a program's log file (what a server wrote before it ended)."""
    try:
        return last_line(Path(path).read_bytes()[-64 * 1024 :])
    except OSError:
        return "nothing"
