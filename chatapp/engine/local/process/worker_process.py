"""The model worker as a process: spawned, talked to over its two pipes, ended, its crash told."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from chatapp import machine
from chatapp.engine.local.load import cpu_backend, huge_pages, stop_flag
from chatapp.engine.local.load.worker_log import WorkerLog, extra_buffers_from_log, useful_lines
from chatapp.engine.local.pipe_messages import (
    Close,
    Command,
    Generate,
    Loaded,
    LoadFailed,
    Perplexity,
    Reply,
    Score,
    SideFailure,
    SideRequest,
    WarmingUp,
)
from chatapp.engine.local.process.child import exit_words, real_std_streams
from chatapp.engine.protocol import EngineCrashed, EngineError, LoadOptions, ModelInfo

if TYPE_CHECKING:
    from ctypes import Array, c_byte

LOAD_TIMEOUT_S = 300.0
POLL_S = 0.05
SIDE_PIPE_ENDED = (
    "the model worker stopped answering tokenize and capture requests (see its log); "
    "start the model again"
)


class WorkerProcess:
    """The child process that runs the model (worker.py), one at a time: spawn() starts one
    (ending the one before), end() ends it. The main pipe carries one request at a time and
    its answers; the side pipe, a call at a time from any thread. `asked`: the options the user
    gave (what a crash remembers is for them); `loaded`: those the running worker got."""

    def __init__(self, asked: LoadOptions, log: WorkerLog, nice: int = 0) -> None:
        self.asked = asked
        self.loaded = asked
        self.log = log
        self.nice = nice  # the worker lowers its own priority by this much (the TUI's choice)
        self.proc: mp.process.BaseProcess | None = None
        self.conn: Connection | None = None  # the main pipe (replies), while a worker runs
        self.side: Connection | None = None  # the side pipe (tokenize, captures)
        self.send_lock = threading.Lock()
        self.side_lock = threading.Lock()
        self.closed = False  # close() was called: a spawn under way gives up
        self.kill_reason = ""
        self.replies = 0  # replies begun by this worker (a crash in the first names the CPU)
        self.tuning_now: Any = None  # shared with the worker: 1 while a step of its tune runs
        self.tune_stop: Array[c_byte] | None = None  # shared: set after a request is sent
        self.tune_asked = False  # the worker was sent its tune (StartAutotune)
        self.tune_crash = ""  # how the tune on first use crashed the worker ("" if it did not)

    # ---- start and end ----------------------------------------------------------------------

    def spawn(self, options: LoadOptions) -> ModelInfo:
        """End the worker there is, start one loading `options`, and wait for its model; raises
        EngineError with the worker's sentence (EngineCrashed if it died)."""
        self.end()
        self.given_up()
        self.kill_reason = self.tune_crash = ""
        self.loaded = options
        self.replies = 0
        self.tune_asked = False
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        side_parent, side_child = ctx.Pipe()
        self.tuning_now = ctx.Value("b", 0, lock=False)  # no lock: one writer, one byte
        self.tune_stop = ctx.Array("b", stop_flag.SIZE, lock=False)
        shared = (self.tuning_now, self.tune_stop)  # the worker's tune (tune_turns.py)
        self.log.begin()
        from chatapp.engine.local.process import worker

        proc = ctx.Process(
            target=worker.main,
            args=(child, side_child, options, str(self.log.path), self.nice, *shared),
            name="chatapp-worker",
            daemon=True,
        )
        with real_std_streams(), huge_pages.for_children(options.huge_pages):
            proc.start()
        child.close()
        side_child.close()
        self.proc, self.conn, self.side = proc, parent, side_parent
        self.given_up()  # a close() that came while it started ends it here
        return self._wait_loaded()

    def _wait_loaded(self) -> ModelInfo:
        what = "loading the model"
        while True:
            msg = self.recv(timeout=LOAD_TIMEOUT_S, what=what)
            match msg:
                case WarmingUp():
                    what = "warming up (its first decode)"
                case LoadFailed(reason):
                    self.end()
                    raise EngineError(reason)
                case Loaded(info):
                    return info

    def given_up(self) -> None:
        """Raise EngineError if close() was called (the worker, if any, ended)."""
        if self.closed:
            self.end()
            raise EngineError("the model was not loaded: it was closed while loading")

    def close(self) -> None:
        """End the worker; a spawn under way gives up (until the next start clears `closed`)."""
        self.closed = True
        self.end()

    def end(self) -> None:
        """Ask the worker to end, then kill it if it does not; close both pipes."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.is_alive():
            try:
                with self.send_lock:
                    self.pipe().send(Close())
                if self.tune_stop is not None:
                    self.tune_stop[0] = 1  # a tune's step stops: the worker reads the close
            except (OSError, ValueError):
                pass
            proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2.0)
        for conn in (self.conn, self.side):
            try:
                if conn is not None:
                    conn.close()
            except OSError:
                pass

    def kill(self, reason: str) -> None:
        """Stop a stuck worker at once; what was waiting on it then fails, giving `reason`."""
        if self.proc is not None and self.proc.is_alive():
            self.kill_reason = reason
            self.proc.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    # ---- the pipes ----------------------------------------------------------------------------

    def send(self, msg: Command) -> None:
        """A command down the main pipe; raises EngineCrashed when the worker is gone."""
        if not self.alive:
            raise self.crashed("the model worker is not running")
        with self.send_lock:
            try:
                self.pipe().send(msg)
            except (OSError, ValueError) as exc:
                raise self.crashed("the model worker stopped") from exc
        if isinstance(msg, Generate | Score | Perplexity) and self.tune_stop is not None:
            self.tune_stop[0] = 1  # after the send: the worker lowers it, then looks at the pipe

    def recv(self, timeout: float | None = None, what: str = "writing a reply") -> Reply:
        """The worker's next answer on the main pipe; EngineCrashed (saying it died while
        `what`) if it ends first, or after `timeout` seconds (then it is killed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        conn = self.pipe()
        while True:
            try:
                if conn.poll(POLL_S):
                    return conn.recv()
            except (EOFError, OSError) as exc:
                raise self.crashed(self._death(what)) from exc
            if self.proc is None or not self.proc.is_alive():
                if conn.poll(0):
                    continue  # read what it sent before it ended
                raise self.crashed(self._death(what))
            if deadline is not None and time.monotonic() > deadline:
                self.kill(f"it did not answer while {what}")
                raise self.crashed(self._death(what))

    def side_call(self, msg: SideRequest | tuple) -> Any:
        """One request on the side pipe and its answer (from any thread, one at a time);
        EngineError with the worker's sentence when it failed there."""
        if not self.alive:
            raise self.crashed("the model worker is not running")
        side = self.pipe(side=True)
        with self.side_lock:
            try:
                side.send(msg)
                while not side.poll(POLL_S):
                    if not self.alive:
                        raise self.crashed("the model worker died")
                reply = side.recv()
            except (EOFError, OSError) as exc:
                if self.alive:  # its side thread ended: the pipe was closed on the way out
                    raise EngineError(SIDE_PIPE_ENDED) from exc
                raise self.crashed("the model worker died") from exc
        if isinstance(reply, SideFailure):
            raise EngineError(reply.message)
        return reply

    def pipe(self, side: bool = False) -> Connection:
        """The worker's main (or side) pipe; there is one from its spawn on."""
        conn = self.side if side else self.conn
        if conn is None:
            raise self.crashed("the model worker is not running")
        return conn

    # ---- a crash, in words ----------------------------------------------------------------------

    def _death(self, what: str) -> str:
        if self.kill_reason:
            return f"the model worker was ended because {self.kill_reason}"
        return f"the model worker died while {what}"

    def crashed(self, message: str) -> EngineCrashed:
        """The error for a worker that is gone: how it ended, the likely cause (remembered where
        the next start should avoid it), and its log's last useful lines."""
        if self.proc is not None and self.proc.exitcode is None:
            # The pipe can report EOF before the dead child is reaped: wait for its exit code
            # (the signal that killed it is the most useful word of the message).
            self.proc.join(timeout=1.0)
        code = self.proc.exitcode if self.proc is not None else None
        tune_crash = self._tune_crashed_it()
        if tune_crash:  # whichever call noticed, the tune's step is what died
            message = "the model worker died while tuning for this machine"
        shown = None if self.kill_reason else code  # our own SIGKILL: the reason says why
        if shown:
            message += f" ({exit_words(shown)})"
        log = self.log.text()
        cause = self._cause(shown, log)
        if tune_crash and code:  # (a tune's crash has an exit code: _tune_crashed_it)
            self.tune_crash = exit_words(code)
            machine.remember_tune_crash(self.asked.model_path, self.tune_crash)
            cause = "this file is not tuned on first use again here (`chatapp tune` still can)"
        message += f": {cause}" if cause else ""
        return EngineCrashed(message + "; start it again to continue", useful_lines(log), code)

    def _cause(self, shown: int | None, log: str) -> str:
        """The CPU backend's part in a crash, if it had one; a crash in the first reply (the
        backend's first real compute) makes the next start go without its extra buffers."""
        sig = cpu_backend.crash_signal(shown)
        buffers = extra_buffers_from_log(log)
        cause = cpu_backend.crash_cause(sig, buffers, bool(self.loaded.repack))
        if sig is not None and buffers and self.replies == 1 and self.asked.repack is None:
            machine.remember(repack_crash=cpu_backend.backend_name(buffers))
            cause = cpu_backend.fallback_notice(buffers, sig, now=False)
        return cause

    def _tune_crashed_it(self) -> bool:
        """Whether the worker died inside a step of its tune (not killed by us, not closed)."""
        if self.proc is None or self.kill_reason or self.tuning_now is None:
            return False
        return bool(self.proc.exitcode) and bool(self.tuning_now.value)
