"""The tune on first use taking turns with requests in the worker: a step while none waits, the
step stopped when one comes, nothing of the tune while one is served, and on again after."""

from __future__ import annotations

import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from chatapp.engine.local.load.autotune import AutoTune

if TYPE_CHECKING:
    from ctypes import Array, c_byte

    from chatapp.engine.local.load.loaded_model import LoadedModel


class TuneTurns:
    """The worker's tune, if one is on. `tuning` (shared with the parent) is 1 from a step on
    until a request is taken or the tune ends: a crash with it set is the tune's. `stop`
    (shared, stop_flag.py) is set by the parent after it sends a request: the step's decode
    stops where it is."""

    def __init__(
        self, worker: LoadedModel, tuning: c_byte | None, stop: Array[c_byte] | None = None
    ) -> None:
        self.worker = worker
        self.tuning = tuning
        self.stop = stop
        self.tuner: AutoTune | None = None

    def begin(self, plan: dict) -> None:
        """Start the tune `plan` asks for (LocalEngine.start_autotune), unless one is on or
        one ended already in this worker."""
        if self.tuner is not None or self.worker.autotune_status is not None:
            return
        self.tuner = AutoTune(self.worker, **plan, stop_flag=self.stop)
        self.worker.autotune_status = self.tuner.status

    def wants_a_step(self, conn: Connection) -> bool:
        """A tune is on and no request waits. The flag is lowered before the pipe is looked at,
        so a request sent after the look raises it again and stops the next step's decode."""
        if self.tuner is None:
            return False
        if self.stop is not None:
            self.stop[0] = 0
        idle = not conn.poll(0)
        self._mark(idle)
        return idle

    def step(self) -> None:
        """One step of the tune (one decode, or less when a request stops it)."""
        tuner = self.tuner
        if tuner is None:
            return
        self._mark(True)
        more = tuner.step()
        self.worker.autotune_status = tuner.status
        if not more:
            self.tuner = None
            self._mark(False)

    def _mark(self, tuning: bool) -> None:
        if self.tuning is not None:
            self.tuning.value = int(tuning)

    @property
    def on(self) -> bool:
        return self.tuner is not None

    def serve(self, kind: str, run: Callable[[], None]) -> None:
        """Run a request; with a tune on, noted in its timeline with the thread count the main
        context had when the request began (the tune's trials run on scratch contexts only)."""
        tuner = self.tuner
        if tuner is None:
            run()
            return
        start = time.perf_counter()
        threads = self.worker.lib.llama_n_threads(self.worker.ctx)
        run()
        tuner.served(kind, start, time.perf_counter(), threads)
