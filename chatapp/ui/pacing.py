"""Frame pacing while a reply streams: the UI spends at most a set share of one core."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from chatapp.ui.streaming import Cadence

SETTLE_FRAMES = 2  # the first frames of a reply also mount its widgets: not a frame's cost
SMOOTHING = 0.3  # weight of the newest frame in the running cost


class FramePacer:
    """Spaces a streaming reply's text frames so the UI process (drawing, layout, reading the
    worker's pipe) uses at most `cadence.budget` of one core.

    When llama.cpp's threads fill every core, each millisecond the UI runs stalls all of them
    (they wait for each other at every step), so the model slows by about the UI's share.
    Frames are paced by what they cost on this machine: a fast CPU gets a smooth stream, a
    slow one fewer, larger steps; never slower than `cadence.ceiling_s`. A cadence without a
    budget keeps its fixed interval.
    """

    def __init__(
        self,
        cadence: Cadence,
        cpu: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cpu, self.clock = cpu, clock
        self.cadence = cadence
        self.text_s = cadence.text_s  # read by the generation thread before each flush
        self.frame_cpu_s: float | None = None  # running CPU cost of one frame interval
        self._last_cpu = 0.0
        self._frames = 0

    def use(self, cadence: Cadence) -> None:
        """A new model: its cadence, and what was learned of frame costs starts over."""
        self.cadence = cadence
        self.text_s = cadence.text_s
        self.frame_cpu_s = None

    @property
    def panels_s(self) -> float:
        """The side panels redraw at most this often (a few text frames apart)."""
        return max(self.cadence.panels_s, 4 * self.text_s)

    @property
    def cpu_share(self) -> float | None:
        """The UI's share of one core at the current interval, as last measured."""
        if self.frame_cpu_s is None:
            return None
        return self.frame_cpu_s / self.text_s

    def start(self) -> None:
        """A reply starts streaming (the interval learned from earlier replies is kept)."""
        self._frames = 0
        self._last_cpu = self.cpu()

    def framed(self) -> None:
        """One batch of tokens reached the UI: the CPU used since the previous one is the
        cost of a frame interval at the current spacing."""
        now = self.cpu()
        spent, self._last_cpu = now - self._last_cpu, now
        self._frames += 1
        budget = self.cadence.budget
        if budget is None or self._frames <= SETTLE_FRAMES:
            return
        cost = (
            spent
            if self.frame_cpu_s is None
            else (SMOOTHING * spent + (1 - SMOOTHING) * self.frame_cpu_s)
        )
        self.frame_cpu_s = cost
        # cost = frame + background work over the interval, so this converges on the spacing
        # where the UI's share equals the budget (or the ceiling, if the background alone is
        # over it).
        self.text_s = min(max(cost / budget, self.cadence.text_s), self.cadence.ceiling_s)


def settle_gc() -> None:
    """Collect now (between replies) and freeze what survives: the long-lived widgets then cost
    nothing in the collections that would otherwise pause the UI >100 ms while streaming."""
    gc.collect()
    gc.freeze()
