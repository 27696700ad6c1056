"""Stops a decode step that runs far past its pace (another program took a core mid-step)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chatapp.engine.local.load import stop_flag

if TYPE_CHECKING:
    from chatapp.engine.local.load.thread_governor import ThreadGovernor

ABORTED = 2  # what llama_decode returns for a decode the abort callback stopped


class StallGuard:
    """Watches one decode at a time from a thread of its own: once the decode has run
    `limit_s`, it sets the context's stop flag, and llama.cpp ends the decode at the graph's
    next node, dropping the positions it was writing (llama_decode returns 2). The caller then
    runs the step again on fewer threads.

    Why: llama.cpp's threads wait for each other at every node of the graph, so when another
    program takes one of their cores in the middle of a step, that step waits a scheduler slice
    at each of ~600 barriers: one step on two threads beside a program that had just started
    took 0.4-3.5 s here, against 12 ms on one thread. The thread governor reads the machine only
    between steps, so without the guard it could only react after paying for that step.

    The watcher sleeps until the deadline of the decode under way (it wakes ~25 times a second
    during a reply, and not at all between replies); a guard whose context has no abort
    callback (no libc found) runs every decode whole."""

    def __init__(self, lib, ctx) -> None:
        self.flag = stop_flag.new_flag()
        self._callback: Any = stop_flag.watch(lib, ctx, self.flag)
        self._deadline = 0.0  # perf_counter time the decode under way may run to; 0: none
        self._wake = threading.Event()
        self._lock = threading.Lock()  # the flag set only for the decode whose deadline passed
        self._closed = False
        self.stopped = 0  # decodes stopped so far
        self._thread = threading.Thread(target=self._run, name="stall-guard", daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        """Whether decodes can be stopped at all (the context's abort callback is set)."""
        return self._callback is not None

    def step(self, decode: Callable[[], int], governor: ThreadGovernor) -> int:
        """`decode()`'s code: stopped at the governor's stall limit and run again one thread
        fewer (the governor told) while it stalls. The step run again computes the same logits
        (tests/engine/test_stall_guard.py)."""
        while (limit := governor.stall_limit()) is not None:
            code, stalled = self.run(decode, limit)
            if not stalled:
                return code
            governor.stalled()
        return decode()

    def run(self, decode: Callable[[], int], limit_s: float) -> tuple[int, bool]:
        """`decode()`'s code, stopped once it has run `limit_s`; and whether it was stopped
        (its positions are then out of the KV cache: run it again)."""
        if self._callback is None:
            return decode(), False
        self._deadline = time.perf_counter() + limit_s
        self._wake.set()
        try:
            code = decode()
        finally:
            with self._lock:
                self._deadline = 0.0
                stopped = self.flag[0] != 0
                self.flag[0] = 0
        if stopped and code == ABORTED:
            self.stopped += 1
            return code, True
        return code, False

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()  # (then the deadline is read again: a decode set before the
            deadline = self._deadline  # clear is seen here, one set after it sets the event)
            while deadline and not self._closed:
                left = deadline - time.perf_counter()
                if left <= 0:
                    with self._lock:
                        if self._deadline == deadline:  # still the same decode
                            self.flag[0] = 1
                    break
                time.sleep(left)
                deadline = self._deadline

    def close(self) -> None:
        self._closed = True
        self._wake.set()
