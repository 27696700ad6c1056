"""The worker seen from the parent: its model file checked, std streams to pass, its end."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading


def check_model_file(path: str) -> None:
    """Refuse what is plainly not a model file before a worker is spawned.

    The same checks and words as `chatapp inspect` (gguf_header.validate): a missing file, a
    directory, a FIFO (never opened: that would block), an HTML page from a failed download, a
    bad header; each a ModelFileError, one sentence naming the file.
    """
    from chatapp.gguf.header import validate

    validate(path)


def exit_words(code: int) -> str:
    """How a worker ended, in words: "signal SIGSEGV", "exit code 3"."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


_STREAMS = threading.Lock()  # sys.stdout and sys.stderr are the process's


@contextlib.contextmanager
def real_std_streams():
    """multiprocessing passes sys.stderr's fd to its helper process; a TUI (or pytest) may have
    swapped in an object without one, so point both at /dev/null while spawning."""
    with _STREAMS:  # (two at once would each put back what the other set)
        saved = sys.stdout, sys.stderr
        devnull = None
        try:
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name)
                try:
                    ok = stream is not None and stream.fileno() >= 0
                except (OSError, ValueError, AttributeError):
                    ok = False
                if not ok:
                    devnull = devnull or open(os.devnull, "w")
                    setattr(sys, name, devnull)
            yield
        finally:
            sys.stdout, sys.stderr = saved
            if devnull is not None:
                devnull.close()
