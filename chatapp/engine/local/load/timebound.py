"""Run pure-Python work (a chat template from a model file) with a time limit, in any thread."""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


def call_with_timeout(fn: Callable[[], T], seconds: float) -> T:
    """fn(), or TimeoutError("took longer than N s") once `seconds` have passed.

    In the main thread a SIGALRM timer interrupts it; in any other thread (the worker's side
    pipe) a timer thread raises TimeoutError inside it with PyThreadState_SetAsyncExc. Both
    interrupt Python bytecode only: a single C call that never returns is not stopped.
    """
    message = f"took longer than {seconds:g} s"
    if threading.current_thread() is threading.main_thread():
        return _with_alarm(fn, seconds, message)
    return _with_async_exc(fn, seconds, message)


def _with_alarm(fn: Callable[[], T], seconds: float, message: str) -> T:
    def on_alarm(signum, frame):
        raise TimeoutError(message)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _with_async_exc(fn: Callable[[], T], seconds: float, message: str) -> T:
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"armed": False, "done": False, "fired": False, "early": False}

    def fire() -> None:
        with lock:
            if not state["armed"]:
                # Under load the timer can fire before start() has returned: an exception
                # delivered inside Thread.start() breaks threading's own bookkeeping (a
                # KeyError escapes), so the deadline is reported once start() is back.
                state["early"] = True
            elif not state["done"]:
                state["fired"] = True
                _set_async_exc(tid, TimeoutError)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    try:
        try:
            timer.start()
            with lock:
                state["armed"] = True
                if state["early"]:
                    state["fired"] = True
                    raise TimeoutError
            return fn()
        finally:
            with lock:
                state["done"] = True
            timer.cancel()
            if state["fired"]:
                _set_async_exc(tid, ctypes.py_object())  # NULL: clear one not yet delivered
    except TimeoutError:
        if state["fired"]:
            raise TimeoutError(message) from None
        raise
