"""How far a long job is, in one line: done / total, rate, time left (tokens scored, bytes
downloaded), and a bar that redraws that line on a terminal."""

from __future__ import annotations

import sys
import time


def bytes_text(n: float) -> str:
    """A size in bytes as people read it: '4.4 GB', '145.0 MB', '512 B'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _left(seconds: float) -> str:
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60}:{seconds % 60:02d}"


def progress_text(
    done: float, total: float, seconds: float, unit: str = "tokens", base: float = 0
) -> str:
    """'120/512 tokens, 85 t/s, 5 s left' or, with unit "bytes", '1.2 GB/4.4 GB, 35.0 MB/s,
    1:32 left'. The rate is over what this run did in `seconds`: `base` is what was done
    before it (a resumed download), counted in done and total but not in the rate."""
    rate = (done - base) / seconds if seconds > 0 else 0.0
    left = f", {_left((total - done) / rate)} left" if rate > 0 and done < total else ""
    if unit == "bytes":
        return f"{bytes_text(done)}/{bytes_text(total)}, {bytes_text(rate)}/s{left}"
    return f"{done:.0f}/{total:.0f} {unit}, {rate:,.0f} t/s{left}"


class ProgressBar:
    """One line per job on stderr, redrawn in place on a terminal (only the final line when
    stderr is a file or a pipe)."""

    WIDTH = 24
    EVERY_S = 0.1  # redraws at most this often (the last one always)

    def __init__(self, name: str, stream=None, unit: str = "tokens") -> None:
        self.name = name
        self.unit = unit
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._drawn = 0.0

    def __call__(self, done: int, total: int, seconds: float, base: int = 0) -> None:
        """`base`: what was already done before this run (a resumed download)."""
        finished = done >= total
        now = time.monotonic()
        if not finished and (not self.tty or now - self._drawn < self.EVERY_S):
            return
        self._drawn = now
        filled = int(self.WIDTH * done / max(total, 1))
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        line = f"{self.name}  {bar} {progress_text(done, total, seconds, self.unit, base)}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if finished else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
