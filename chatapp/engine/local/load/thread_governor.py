"""The decode thread count, kept right while the machine changes: probe one fewer when steps
slow down or another program takes a core, one more when the cores free up; keep what is faster."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW = 6  # single-token steps timed at one count before it is judged
SLOWER = 1.25  # a window this much slower than the quiet pace starts a probe downward
FASTER = 0.95  # a probe is kept when its steps take at most this share of the time before
HOPELESS = 2.0  # a probe's first steps this much slower than before end it at once
HINT_EVERY_S = 0.25  # how often the other programs' CPU use is read (psutil: ~30 us)
BUSY_CORES = 0.5  # other programs using this many cores or more: probe one thread fewer
FREE_CORES = 0.3  # ... this few or fewer while running with fewer threads: probe one more
UP_EVERY_S = 1.0  # with fewer threads than the most, try one more this often at least
BACKOFF_MAX_S = 8.0  # a probe that lost waits longer each time, up to this


@dataclass(frozen=True)
class Switch:
    """A change of thread count during a reply: at which token, to how many, and why."""

    index: int
    threads: int
    why: str  # "slower", "busy", "free", "retry", "back"


@dataclass
class ThreadGovernor:
    """Chooses the thread count between two decodes of a reply. `apply(n)` sets it on the live
    context (llama_set_n_threads); `others()` returns the cores other programs used since the
    last call (None where unknown). The count starts at `most`, the tuned quiet-machine best,
    and only a measured window of steps keeps a change: a hint only starts a probe."""

    most: int
    apply: Callable[[int], None]
    apply_batch: Callable[[int], None] = lambda n: None  # the prompt's batches only
    others: Callable[[], float | None] = lambda: None
    clock: Callable[[], float] = time.perf_counter
    threads: int = 0
    switches: list[Switch] = field(default_factory=list)
    busy_cores: float | None = None  # other programs' cores at the last reading
    _window: list[float] = field(default_factory=list)
    _pace: dict[int, float] = field(default_factory=dict)  # the normal step time per count
    _probe: tuple[int, float] | None = None  # (count before the probe, its window's median)
    _next_hint: float = 0.0
    _next_down: float = 0.0
    _next_up: float = 0.0
    _wait_down: float = UP_EVERY_S
    _wait_up: float = UP_EVERY_S

    def __post_init__(self) -> None:
        self.threads = self.threads or self.most

    def before_prefill(self) -> None:
        """A prompt is about to be evaluated: with the count at its most and another program
        busy now, the batch runs one thread short (a 2-core box with one core taken evaluates a
        prompt ~3-8x faster on 1 thread than on 2); single-token steps then probe as usual."""
        self.busy_cores = self.others()
        self._next_hint = self.clock() + HINT_EVERY_S
        if self.busy_cores is not None and self.busy_cores >= BUSY_CORES:
            if self.threads == self.most:
                self.apply_batch(self.threads - 1)

    def after_prefill(self) -> None:
        """Back to the decode count for both single steps and draft batches."""
        self.apply(self.threads)

    def step(self, seconds: float, index: int) -> None:
        """One single-token decode took `seconds`; it was token `index` of the reply."""
        now = self.clock()
        self._window.append(seconds)
        if now >= self._next_hint:
            self._next_hint = now + HINT_EVERY_S
            self.busy_cores = self.others()
            if self._probe is None and self._hinted(now, index):
                return
        if self._probe is not None and len(self._window) == 2:
            if min(self._window) > self._probe[1] * HOPELESS:
                self._judge(min(self._window), now, index)  # no need to wait for the window
                return
        if len(self._window) < WINDOW:
            return
        pace = statistics.median(self._window)
        self._window.clear()
        if self._probe is not None:
            self._judge(pace, now, index)
            return
        normal = self._pace.get(self.threads)
        if normal is None or pace < normal:
            self._pace[self.threads] = pace
        if normal is not None and pace > normal * SLOWER and self._may_go_down(now):
            self._start(self.threads - 1, pace, index, "slower")
        elif self.threads < self.most and now >= self._next_up and not self._still_busy():
            self._start(self.threads + 1, pace, index, "retry")

    def _still_busy(self) -> bool:
        """Whether the last reading saw other programs on a core (then the count goes back up
        when a reading sees them gone, not by trying it on a schedule)."""
        return self.busy_cores is not None and self.busy_cores >= BUSY_CORES

    def _may_go_down(self, now: float) -> bool:
        return self.threads > 1 and now >= self._next_down

    def _hinted(self, now: float, index: int) -> bool:
        """Start a probe when the other programs' CPU use says the count may be wrong."""
        busy = self.busy_cores
        if busy is None:
            return False
        pace = statistics.median(self._window)
        if busy >= BUSY_CORES and self.threads == self.most and self._may_go_down(now):
            self._start(self.threads - 1, pace, index, "busy")
            return True
        if busy <= FREE_CORES and self.threads < self.most and now >= self._next_up - 0.5:
            self._start(self.threads + 1, pace, index, "free")
            return True
        return False

    def _start(self, threads: int, pace: float, index: int, why: str) -> None:
        self._probe = (self.threads, pace)
        self._set(threads, index, why)

    def _judge(self, pace: float, now: float, index: int) -> None:
        """A probe's window is done: keep its count if it was faster, else go back."""
        before, before_pace = self._probe or (self.threads, pace)
        self._probe = None
        went_down = self.threads < before
        if pace <= before_pace * FASTER:
            self._pace[self.threads] = pace
            if went_down:
                self._wait_down = UP_EVERY_S
            else:
                self._wait_up = UP_EVERY_S
            self._next_up = now + UP_EVERY_S
            return
        self._set(before, index, "back")
        self._pace[before] = before_pace  # the pace it had is its normal now
        if went_down:
            self._next_down = now + self._wait_down
            self._wait_down = min(self._wait_down * 2, BACKOFF_MAX_S)
        else:
            self._next_up = now + self._wait_up
            self._wait_up = min(self._wait_up * 2, BACKOFF_MAX_S)

    def _set(self, threads: int, index: int, why: str) -> None:
        self.threads = threads
        self._window.clear()
        self.apply(threads)
        self.switches.append(Switch(index, threads, why))


def thread_stats(governor: ThreadGovernor | None, since: int, threads: int) -> dict:
    """GenerationStats fields of a reply: the count at its end, the quiet count, the changes
    made during it (switches[since:]) and the other programs' cores last seen."""
    if governor is None:
        return {"threads": threads, "threads_most": threads}
    return {
        "threads": governor.threads,
        "threads_most": governor.most,
        "thread_switches": tuple((s.index, s.threads, s.why) for s in governor.switches[since:]),
        "busy_cores": None if governor.busy_cores is None else round(governor.busy_cores, 2),
    }
