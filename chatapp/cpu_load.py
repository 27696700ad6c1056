"""What other programs take of the CPU, from psutil (Linux, macOS, Windows): the cores they used
between two readings on the CPUs this process may run on, it and its children left out."""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil

from chatapp.cpus import allowed_cpus, machine_cpus


def _busy(t: Any) -> float:
    """Seconds of one cpu_times() reading spent on anything but idling (steal included: a
    VM's host taking the core slows llama.cpp as another program would)."""
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _busy_seconds() -> float:
    """Busy seconds since boot of the CPUs this process may run on (cpus.allowed_cpus): a
    program on a CPU it may not use (taskset, a cpuset) takes nothing from it."""
    mine = allowed_cpus()
    if len(mine) >= machine_cpus():
        return _busy(psutil.cpu_times())
    per_cpu = psutil.cpu_times(percpu=True)
    return sum(_busy(per_cpu[i]) for i in mine if i < len(per_cpu))


def _own_seconds(me: psutil.Process) -> float:
    """CPU seconds of this process, its ended children and its living ones."""
    total = 0.0
    try:
        t = me.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in me.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


class OtherPrograms:
    """Call it for the cores other programs used since the last call (or since it was made);
    None when psutil cannot say. `children=False` leaves out the children's time (a worker
    measures only itself: its parent, the UI, is another program to llama.cpp's threads);
    `max_age_s`: a call later than that after the one before answers None (stale)."""

    def __init__(self, children: bool = True, max_age_s: float | None = None) -> None:
        self._me = psutil.Process()
        self._children = children
        self._max_age_s = max_age_s  # a longer interval says nothing of now: None
        self._last = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        try:
            own = _own_seconds(self._me) if self._children else sum(self._me.cpu_times()[:2])
            return _busy_seconds(), own, time.monotonic()
        except (psutil.Error, OSError):
            return None

    def __call__(self) -> float | None:
        now = self._read()
        before, self._last = self._last, now
        if before is None or now is None or now[2] <= before[2]:
            return None
        if self._max_age_s is not None and now[2] - before[2] > self._max_age_s:
            return None  # (between two replies: what ran then may be gone)
        others = (now[0] - before[0]) - (now[1] - before[1])
        return max(0.0, others) / (now[2] - before[2])


class LoadWatch:
    """The cores other programs use now, read on a background thread every `every_s` (~30 us
    a reading), so a fresh reading is at hand the moment a reply starts, after an idle gap as
    well (a reading taken across the gap would say nothing of now; none at all left the
    governor blind for the prompt and the first tokens). None when psutil cannot say."""

    FIRST_S = 0.05  # the shortest span a first reading is taken over (ticks are 10 ms)

    def __init__(self, every_s: float = 0.25, children: bool = False) -> None:
        self._reader = OtherPrograms(children=children, max_age_s=every_s * 4)
        self._every_s = every_s
        self._started = time.monotonic()
        self._latest: float | None = None
        self._at: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with self._lock:
            self._latest, self._at = self._reader(), time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self._read()

    def __call__(self) -> float | None:
        """The last reading. Asked before the first (a reply right after the model loaded),
        it reads now, over at least FIRST_S since the watch began; a reading older than a
        few intervals (a paused process, a machine that slept) is read again too."""
        at = self._at
        if at is None or time.monotonic() - at > self._every_s * 4:
            time.sleep(max(0.0, self._started + self.FIRST_S - time.monotonic()))
            self._read()
        return self._latest

    def fresh(self, span_s: float = 0.05) -> float | None:
        """A reading of the next `span_s` only: a busy last reading may be a program that just
        ended (a build step, a benchmark's last run), and a prompt put on one thread short
        for it evaluates at half speed on a machine that is free again."""
        with self._lock:
            self._reader()  # (ends the interval under way: what came before is not read)
            time.sleep(span_s)
            self._latest, self._at = self._reader(), time.monotonic()
            return self._latest

    def close(self) -> None:
        self._stop.set()


SPARE_CORES = 0.25  # other programs may use this much of a core beyond the spare ones


def disturbed(busy_cores: float | None, threads: int, cores: int | None = None) -> bool:
    """Whether other programs took time from llama.cpp's threads: they used more than the
    cores its threads left free (plus a quarter of one, for the odd daemon). `cores`: the
    CPUs the load is read on (those this process may run on) unless given."""
    cores = cores or len(allowed_cpus())
    return busy_cores is not None and busy_cores > max(cores - threads, 0) + SPARE_CORES


def share_of_cpu(cores: float | None) -> float | None:
    """Cores used, as a share of the CPUs the load is read on (those this process may run
    on)."""
    if cores is None:
        return None
    return cores / len(allowed_cpus())
