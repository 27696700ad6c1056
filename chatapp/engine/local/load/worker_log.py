"""llama.cpp's log in the worker: the one place that reads it (WorkerLog, read_since), and
what it says: load errors, GPU layers, buffer types, crash lines."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

READ_LIMIT = 4 * 1024 * 1024
LOG_LIMIT = 4 * 1024 * 1024  # past this, a new worker's log starts afresh (worker.log.1 kept)


def log_size(log_path: str | Path) -> int:
    """Where the next thing written to the log will start (0 for no file)."""
    try:
        return os.path.getsize(log_path)
    except OSError:
        return 0


def read_since(log_path: str | Path, offset: int) -> str:
    """What was written to the log since `offset` (its last READ_LIMIT bytes at most)."""
    try:
        sys.stderr.flush()
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            return fh.read()[-READ_LIMIT:].decode("utf-8", "replace")
    except OSError:
        return ""


def rotate(log_path: str | Path) -> None:
    """Keep the worker log small: past LOG_LIMIT it moves to worker.log.1."""
    log = Path(log_path)
    try:
        if log.stat().st_size > LOG_LIMIT:
            log.replace(log.with_name(log.name + ".1"))
    except OSError:
        pass


class WorkerLog:
    """The log file of one worker (both processes use one): the part written since mark()."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.start = 0

    def begin(self) -> None:
        """Before a worker starts: make room (rotate) and mark where its part begins."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rotate(self.path)
        self.mark()

    def mark(self) -> None:
        self.start = log_size(self.path)

    def text(self) -> str:
        """What was written since mark() (the last READ_LIMIT bytes at most)."""
        return read_since(self.path, self.start)

    def tail(self, lines: int = 8) -> str:
        """The lines worth showing after a failure (useful_lines of text())."""
        return useful_lines(self.text(), lines)


_LOAD_ERROR_RE = re.compile(r"error loading model: (.+)")


def load_error_from_log(log_text: str) -> str:
    """llama.cpp's own reason for a failed load ('' when it gave none)."""
    found = _LOAD_ERROR_RE.findall(log_text)
    return found[-1].strip() if found else ""


_OFFLOAD_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def offloaded_from_log(log_text: str) -> int | None:
    """Layers on the GPU as llama.cpp logged them, when it did."""
    found = _OFFLOAD_RE.findall(log_text)
    return int(found[-1][0]) if found else None


_BUFFER_RE = re.compile(r"load_tensors:\s+(\S+) model buffer size")
_EXTRA_BUFFERS = ("AMX", "CPU_REPACK", "KLEIDIAI")


def extra_buffers_from_log(log_text: str) -> tuple[str, ...]:
    """The extra CPU buffer types llama.cpp put weights in (AMX, CPU_REPACK), in log order."""
    found = [name for name in _BUFFER_RE.findall(log_text) if name.upper() in _EXTRA_BUFFERS]
    return tuple(dict.fromkeys(found))


_FA_AUTO_RE = re.compile(r"Flash Attention (enabled|not supported)")


def flash_attn_from_log(log_text: str, requested: bool) -> bool:
    """Flash attention as llama.cpp resolved "auto" (the requested value when not auto)."""
    found = _FA_AUTO_RE.findall(log_text)
    return found[-1] == "enabled" if found else requested


_LOG_LINE = re.compile(r"^[A-Za-z_][\w.]*:\s")
_DUMP_LINE = re.compile(
    r"^llama_model_loader: - (kv|type)\s|^print_info: |^llama_graph_n_input_tensors: "
)
_BUFFER_LINE = re.compile(r"model buffer size|REPACK|AMX", re.IGNORECASE)


def useful_lines(log_text: str, lines: int = 8) -> str:
    """The log lines worth showing after a crash: the buffer types llama.cpp chose and its last
    lines before the end, without the metadata dump (a chat template spans many lines)."""
    kept: list[str] = []
    for line in log_text.splitlines():
        if not line.strip() or _DUMP_LINE.match(line):
            continue
        if _LOG_LINE.match(line) or line.startswith(("ggml", "GGML", "error", "Error")):
            kept.append(line.rstrip())
    buffers = [ln for ln in kept if _BUFFER_LINE.search(ln)][:4]
    tail = [ln for ln in kept[-lines:] if ln not in buffers]
    return "\n".join(buffers + tail)
