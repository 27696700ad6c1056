"""A child process seen from the parent: std streams multiprocessing can pass, its end in words."""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def exit_words(code: int) -> str:
    """How a worker ended, in words: "signal SIGSEGV", "exit code 3"."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


@contextlib.contextmanager
def real_std_streams():
    """multiprocessing passes sys.stderr's fd to its helper process; a TUI (or pytest) may have
    swapped in an object without one, so point both at /dev/null while spawning."""
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
