"""Client side of the child-process engine: spawns the worker and streams its events."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from chatapp import machine, paths
from chatapp.engine.capabilities import Capabilities
from chatapp.engine.control_vector import ControlVector
from chatapp.engine.inspection import Inspection, InspectRequest
from chatapp.engine.local.load import cpu_backend, gpu_fallback, huge_pages, stop_flag
from chatapp.engine.local.load.worker_log import WorkerLog, extra_buffers_from_log, useful_lines
from chatapp.engine.local.loop.perplexity_scoring import PerplexityJob
from chatapp.engine.local.process import side_pipe
from chatapp.engine.local.process.child import check_model_file, exit_words, real_std_streams
from chatapp.engine.protocol import (
    ChatMessage,
    EngineCrashed,
    EngineError,
    Event,
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    TokenPiece,
)
from chatapp.engine.steering import Meter, Steering, SteeringError
from chatapp.sampling import SamplerSettings

LOAD_TIMEOUT_S = 300.0
POLL_S = 0.05
SIDE_PIPE_ENDED = (
    "the model worker stopped answering tokenize and capture requests (see its log); "
    "start the model again"
)


class LocalEngine:
    """A model running in a child process. Generation calls come from one thread at a time;
    cancel() and update_settings() may come from any thread."""

    capabilities = Capabilities(
        live_settings=True,
        steering=True,
        inside=True,
        drafts=True,
        parallel_alternatives=True,
        sampled_probabilities=True,
        candidates=True,
        grammar=True,
        raw_prompt=True,
        tokenize=True,
        autotune=True,
        scoring=True,
        limits=True,
    )

    def __init__(self, options: LoadOptions, nice: int = 0) -> None:
        self.options = options
        self.nice = nice  # the worker lowers its own priority by this much (the TUI's choice)
        self.info: ModelInfo | None = None
        self.log = WorkerLog(paths.log_dir() / "worker.log")
        self._proc: mp.process.BaseProcess | None = None
        self._conn: Connection | None = None  # the main pipe (replies), while a worker runs
        self._side: Connection | None = None  # the side pipe (tokenize, captures)
        self._send_lock = threading.Lock()
        self._side_lock = threading.Lock()
        self._kill_reason = ""
        self._loaded_options = options
        self._replies = 0  # replies begun by this worker (a crash in the first names the CPU)
        self._tuning_now = None  # shared with the worker: 1 while a step of its tune runs
        self._tune_stop = None  # shared: set after a request is sent, the tune's step stops
        self._tune_asked = False  # start_autotune() sent the worker its tune
        self._tune_crash = ""  # how the tune on first use crashed the worker ("" if it did not)
        self._closed = False  # close() was called: a start() under way gives up
        self.notes: list[str] = []  # what start() had to do to load (step-down, fallback)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> ModelInfo:
        """Spawn a worker and load the model; raises EngineError naming the file and reason
        (ModelFileError when the file is plainly not a model, before any worker).

        Every path that loads a model comes here, so all of them get the same recoveries: a
        load with GPU layers that runs out of memory steps down (halving to the CPU,
        remembered per file; any other refusal, such as an unknown architecture, fails at
        once), and a worker that crashes in llama.cpp's extra CPU buffers (AMX, repacking) on its
        first compute is started again without them (remembered for this machine). What
        happened is in `notes`, one sentence each. A close() from another thread (the app
        quitting) ends it at once with an EngineError."""
        self._closed = False
        check_model_file(self.options.model_path)
        if self.options.draft_model:
            check_model_file(self.options.draft_model)
        self.notes = []
        options, tuned = cpu_backend.choose(self.options)
        steps = gpu_fallback.steps_for(options)
        first_error: EngineError | None = None
        for layers in steps:
            try:
                info = self._start_surviving(replace(options, n_gpu_layers=layers))
            except EngineError as exc:
                if self._closed or layers == steps[-1]:
                    raise
                if not gpu_fallback.out_of_memory(str(exc), self.log.text()):
                    raise  # fewer GPU layers cannot help: this error says why
                first_error = first_error or exc
                continue
            if first_error is not None:
                gpu_fallback.remember_layers(options.model_path, layers)
                self.notes.append(gpu_fallback.step_down_notice(first_error, layers))
            self.info = replace(info, tuned=tuned)
            return self.info
        raise AssertionError("steps_for returns at least one step")

    def _start_surviving(self, options: LoadOptions) -> ModelInfo:
        """One load; a crash of the extra CPU buffers on the first compute is retried once
        without them (unless the user asked for them)."""
        try:
            return self._spawn(options)
        except EngineCrashed as exc:
            sig = cpu_backend.crash_signal(exc.exitcode)
            buffers = extra_buffers_from_log(self.log.text())
            if sig is None or not cpu_backend.retry_without_buffers(
                sig, buffers, bool(options.repack), self.options.repack is True
            ):
                raise
        machine.remember(repack_crash=cpu_backend.backend_name(buffers))
        self.notes.append(cpu_backend.fallback_notice(buffers, sig))
        return self._spawn(replace(options, repack=False))

    def _spawn(self, options: LoadOptions) -> ModelInfo:
        self._end_worker()
        self._given_up()
        self._kill_reason = self._tune_crash = ""
        self._loaded_options = options
        self._replies = 0
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        side_parent, side_child = ctx.Pipe()
        self._tuning_now = ctx.Value("b", 0, lock=False)  # no lock: one writer, one byte
        self._tune_stop = ctx.Array("b", stop_flag.SIZE, lock=False)
        self._tune_asked = False
        shared = (self._tuning_now, self._tune_stop)  # the worker's tune (tune_turns.py)
        self.log.begin()
        from chatapp.engine.local.process import worker

        proc = ctx.Process(
            target=worker.main,
            args=(child, side_child, options, str(self.log_path), self.nice, *shared),
            name="chatapp-worker",
            daemon=True,
        )
        with real_std_streams(), huge_pages.for_children(options.huge_pages):
            proc.start()
        child.close()
        side_child.close()
        self._proc, self._conn, self._side = proc, parent, side_parent
        self._given_up()  # a close() that came while it started ends it here
        what = "loading the model"
        while True:
            msg = self._recv(timeout=LOAD_TIMEOUT_S, what=what)
            if msg[0] != "warming_up":
                break
            what = "warming up (its first decode)"
        if msg[0] == "load_failed":
            self.close()
            raise EngineError(msg[1])
        self.info = msg[1]
        return self.info

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def close(self) -> None:
        """End the worker (frees all model and GPU memory). Called from another thread while
        start() runs, that start gives up (EngineError) rather than load or load again. For a
        quit that must not wait, kill() first: the worker then ends whatever it was doing."""
        self._closed = True
        self._end_worker()

    def _given_up(self) -> None:
        if self._closed:
            self._end_worker()
            raise EngineError("the model was not loaded: it was closed while loading")

    def _end_worker(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.is_alive():
            try:
                with self._send_lock:
                    self._pipe().send(("close",))
                if self._tune_stop is not None:
                    self._tune_stop[0] = 1  # a tune's step stops: the worker reads the close
            except (OSError, ValueError):
                pass
            proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2.0)
        for conn in (self._conn, self._side):
            try:
                if conn is not None:
                    conn.close()
            except OSError:
                pass
        self.info = None

    def kill(self, reason: str = "it did not stop when asked") -> None:
        """Stop a stuck worker at once; the reply in progress then fails, giving `reason`."""
        if self._proc is not None and self._proc.is_alive():
            self._kill_reason = reason
            self._proc.kill()

    def __enter__(self) -> LocalEngine:
        if self.info is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- talking to the worker ----------------------------------------------------------

    def _send(self, msg) -> None:
        if not self.alive:
            raise self._crashed("the model worker is not running")
        with self._send_lock:
            try:
                self._pipe().send(msg)
            except (OSError, ValueError) as exc:
                raise self._crashed("the model worker stopped") from exc
        if msg[0] in ("generate", "score", "perplexity") and self._tune_stop is not None:
            self._tune_stop[0] = 1  # after the send: the worker lowers it, then looks at the pipe

    def _recv(self, timeout: float | None = None, what: str = "writing a reply"):
        deadline = None if timeout is None else time.monotonic() + timeout
        conn = self._pipe()
        while True:
            try:
                if conn.poll(POLL_S):
                    return conn.recv()
            except (EOFError, OSError) as exc:
                raise self._crashed(self._death(what)) from exc
            if self._proc is None or not self._proc.is_alive():
                if conn.poll(0):
                    continue  # read what it sent before it ended
                raise self._crashed(self._death(what))
            if deadline is not None and time.monotonic() > deadline:
                self.kill(f"it did not answer while {what}")
                raise self._crashed(self._death(what))

    def _pipe(self, side: bool = False) -> Connection:
        """The worker's main (or side) pipe; there is one from its spawn on."""
        conn = self._side if side else self._conn
        if conn is None:
            raise self._crashed("the model worker is not running")
        return conn

    def _death(self, what: str) -> str:
        if self._kill_reason:
            return f"the model worker was ended because {self._kill_reason}"
        return f"the model worker died while {what}"

    def _crashed(self, message: str) -> EngineCrashed:
        if self._proc is not None and self._proc.exitcode is None:
            # The pipe can report EOF before the dead child is reaped: wait for its exit code
            # (the signal that killed it is the most useful word of the message).
            self._proc.join(timeout=1.0)
        code = self._proc.exitcode if self._proc is not None else None
        tune_crash = self._tune_crashed_it()
        if tune_crash:  # whichever call noticed, the tune's step is what died
            message = "the model worker died while tuning for this machine"
        shown = None if self._kill_reason else code  # our own SIGKILL: the reason says why
        if shown:
            message += f" ({exit_words(shown)})"
        log = self.log.text()
        sig = cpu_backend.crash_signal(shown)
        buffers = extra_buffers_from_log(log)
        cause = cpu_backend.crash_cause(sig, buffers, bool(self._loaded_options.repack))
        if sig is not None and buffers and self._replies == 1 and self.options.repack is None:
            # Its first reply: the backend's first real compute. The next start goes without.
            machine.remember(repack_crash=cpu_backend.backend_name(buffers))
            cause = cpu_backend.fallback_notice(buffers, sig, now=False)
        if tune_crash and code:  # (a tune's crash has an exit code: _tune_crashed_it)
            self._tune_crash = exit_words(code)
            machine.remember_tune_crash(self.options.model_path, self._tune_crash)
            cause = "this file is not tuned on first use again here (`chatapp tune` still can)"
        message += f": {cause}" if cause else ""
        tail = useful_lines(log)
        return EngineCrashed(message + "; start it again to continue", tail, code)

    def _tune_crashed_it(self) -> bool:
        """Whether the worker died inside a step of its tune (not killed by us, not closed)."""
        if self._proc is None or self._kill_reason or self._tuning_now is None:
            return False
        return bool(self._proc.exitcode) and bool(self._tuning_now.value)

    @property
    def log_path(self) -> Path:
        return self.log.path

    def log_tail(self, lines: int = 8) -> str:
        """The worker log lines worth showing: buffer types and llama.cpp's last lines."""
        return self.log.tail(lines)

    # ---- the Engine interface -----------------------------------------------------------

    def generate(self, request: GenerateRequest) -> Iterator[Event]:
        """Stream one reply's events; raises EngineCrashed if the worker dies."""
        self._send(("generate", request, time.perf_counter()))  # (one clock for both processes)
        self._replies += 1
        while True:
            msg = self._recv()
            if msg[0] != "events":
                continue
            for event in msg[1]:
                yield event
                if isinstance(event, Finished | Failed):
                    return

    def update_settings(self, settings: SamplerSettings) -> None:
        self._send(("settings", settings))

    def cancel(self) -> None:
        if self.alive:
            self._send(("cancel",))

    def set_steering(self, steering: Steering) -> None:
        """New steering for the reply in progress (engine/local/inside/context_steering.py);
        between replies the next request's own steering is what counts."""
        self._send(("steering", steering))

    def residuals(self, texts: list[str], at: str = "mean") -> np.ndarray:
        """Each text's residual stream out of blocks 0..n_layers-2, [texts, layers, n_embd]:
        the mean over its tokens ("mean") or at its last token ("last"); read on the
        inspector's context, so it may run while a reply generates. Raises SteeringError."""
        found = self._side_call(("steer_residuals", tuple(texts), at))
        if isinstance(found, str):
            raise SteeringError(found)
        return found

    def meter(self, text: str, vector: ControlVector) -> Meter:
        """Each token of `text` and its residual stream's projection on the vector's unit
        direction at each layer (the concept meter). Raises SteeringError."""
        n = (self.info.n_layers if self.info else vector.last_layer + 1) - 1
        units = np.full((n, vector.n_embd), np.nan, dtype=np.float32)
        for layer in range(1, n + 1):
            unit = vector.unit(layer)
            if unit is not None:
                units[layer - 1] = unit
        found = self._side_call(("steer_meter", text, units))
        if isinstance(found, str):
            raise SteeringError(found)
        return Meter(tuple(found[0]), found[1], found[2])

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        return self._side_call(("tokenize", text, special))

    def render_prompt(self, request: GenerateRequest) -> tuple[str, str]:
        """The templated prompt text for a request, and a warning if a fallback was used."""
        return self._side_call(("template", request))

    def inspect(self, request: InspectRequest) -> Inspection:
        """One capture inside the model (chatapp/engine/inspection.py): made in the worker on a
        second context, so it may run while a reply generates and costs that reply nothing.
        The first one reads weights and fills that context (seconds on a long sequence);
        raises EngineError with a sentence when it cannot be made."""
        found = self._side_call(("inspect", request))
        if isinstance(found, str):
            raise EngineError(found)
        return found

    def count_tokens(self, messages: list[ChatMessage]) -> int:
        """Tokens of the templated prompt for these messages (for fitting the context)."""
        text, _ = self.render_prompt(GenerateRequest(messages=tuple(messages)))
        return len(self.tokenize(text, special=True))

    def start_autotune(self) -> bool:
        """Tune on first use: when nothing is saved for this file here and the model runs on
        the CPU, the worker times flash attention on/off (unless exact batches hold it on)
        and the thread counts in its idle
        time (replies go first) and applies the best to its context, no reload. Settings the
        user gave are kept. True if a tune began; follow it with autotune_status(). Nothing is
        read back: a reply's thread may be reading the main pipe (the worker begins the tune
        after that reply)."""
        info = self.info
        if info is None or info.tuned or info.n_gpu_layers > 0 or not self.alive:
            return False
        if machine.tune_crashed(self.options.model_path):
            return False  # it crashed the worker here before: never again on its own
        free = {
            "flash_attn": self.options.flash_attn is None and not info.exact_batches,
            "threads": self.options.n_threads is None,
        }
        if not any(free.values()):
            return False
        plan = {"free": free, "n_gpu_layers": self.options.n_gpu_layers}
        self._send(("autotune", plan))
        self._tune_asked = True
        return True

    def autotune_status(self) -> dict | None:
        """The tune's progress: {"state": "tuning", "done", "total"}, {"state": "done",
        "chosen", ...} (the engine's info then says what runs), {"state": "failed", "error"},
        {"state": "crashed", "error"} when it crashed the worker (remembered: the next start
        does not tune this file), or None when no tune ran."""
        try:
            status = self._side_call(("autotune_status",))
        except EngineCrashed as exc:
            if self._tune_crash:
                return {"state": "crashed", "error": str(exc)}
            raise
        if status is None and self._tune_asked:  # sent; the worker has not begun it yet
            return {"state": "tuning", "done": 0, "total": 0}
        if status and status.get("state") == "done" and status.get("info") is not None:
            self.info = replace(status["info"], tuned=True)
        return status

    def score(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of each next token of a text (for perplexity and KL)."""
        self._send(("score", list(tokens)))
        msg = self._recv(what="scoring")
        if isinstance(msg[1], str):
            raise EngineError(msg[1])
        return msg[1]

    def perplexity(self, job: PerplexityJob, progress=None) -> dict:
        """Score a text in chunks as llama-perplexity does (loop/perplexity_scoring.py);
        calls progress(scored, total, seconds) after each chunk."""
        self._send(("perplexity", job))
        while True:
            msg = self._recv(what="scoring the text")
            if msg[0] == "ppl_progress":
                if progress is not None:
                    progress(*msg[1:])
                continue
            if isinstance(msg[1], str):
                raise EngineError(msg[1])
            return msg[1]

    def _side_call(self, msg):
        if not self.alive:
            raise self._crashed("the model worker is not running")
        side = self._pipe(side=True)
        with self._side_lock:
            try:
                side.send(msg)
                while not side.poll(POLL_S):
                    if not self.alive:
                        raise self._crashed("the model worker died")
                reply = side.recv()
            except (EOFError, OSError) as exc:
                if self.alive:  # its side thread ended: the pipe was closed on the way out
                    raise EngineError(SIDE_PIPE_ENDED) from exc
                raise self._crashed("the model worker died") from exc
        if isinstance(reply, side_pipe.SideFailure):
            raise EngineError(reply.message)
        return reply
