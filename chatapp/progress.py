"""How far a long job is: one line of text (done / total, rate, time left) for the TUI, and
rich's progress bars for the command line (tokens scored, bytes downloaded)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text


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


Bar = Callable[..., None]
"""One job's bar: bar(done, total, seconds, base=0); `base` is what was done before this run
(a resumed download), counted in done and total but not in the rate. (`seconds` is the caller's
clock: the bar measures the rate itself.)"""


@contextmanager
def bars(unit: str = "tokens", console: Console | None = None) -> Iterator[Callable[[str], Bar]]:
    """For the block, a maker of bars on stderr (rich's Progress, as `tune` draws): bars(name)
    adds a line for a job. On a terminal the lines are redrawn in place; into a file or a
    pipe they are printed once, as they ended, when the block ends. `unit` "bytes": sizes,
    transfer speed and time left; else done/total tokens, tokens a second and time left."""
    progress = Progress(
        *_columns(unit), console=console or Console(stderr=True), redirect_stdout=False
    )

    def add(name: str) -> Bar:
        if not progress.live.is_started:  # (no bar, nothing drawn: a pull already here)
            progress.start()
        return _Line(progress, name)

    try:
        yield add
    finally:
        if progress.live.is_started:
            progress.stop()


def _columns(unit: str) -> tuple[ProgressColumn, ...]:
    name = TextColumn("{task.description}", markup=False)  # (a file name: data, never markup)
    if unit == "bytes":
        return (name, BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    return (name, BarColumn(), MofNCompleteColumn(), _TokenRate(), TimeRemainingColumn())


class _TokenRate(ProgressColumn):
    """Tokens a second, as rich measured them."""

    def render(self, task: Task) -> Text:
        return Text(
            "" if task.speed is None else f"{task.speed:,.0f} t/s", style="progress.data.speed"
        )


class _Line:
    """One job's line: added at its first report, with what was there before as done."""

    def __init__(self, progress: Progress, name: str) -> None:
        self.progress = progress
        self.name = name
        self.task: TaskID | None = None

    def __call__(self, done: int, total: int, seconds: float = 0.0, base: int = 0) -> None:
        if self.task is None:
            self.task = self.progress.add_task(self.name, total=total, completed=base)
        self.progress.update(self.task, total=total, completed=done)
