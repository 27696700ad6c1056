"""The Engine API over a model worker process (worker_process.py): requests in, events out."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from chatapp import machine, paths
from chatapp.engine.capabilities import Capabilities
from chatapp.engine.control_vector import ControlVector
from chatapp.engine.inspection import Inspection, InspectRequest
from chatapp.engine.local.load import cpu_backend, gpu_fallback
from chatapp.engine.local.load.worker_log import WorkerLog, extra_buffers_from_log
from chatapp.engine.local.loop.perplexity_scoring import PerplexityJob
from chatapp.engine.local.pipe_messages import (
    AutotuneStatus,
    Cancel,
    Events,
    Generate,
    Inspect,
    NewSettings,
    NewSteering,
    Perplexity,
    PerplexityDone,
    PerplexityProgress,
    RenderPrompt,
    Score,
    Scored,
    SideRequest,
    StartAutotune,
    SteerMeter,
    SteerResiduals,
    Tokenize,
)
from chatapp.engine.local.process.child import check_model_file
from chatapp.engine.local.process.worker_process import WorkerProcess
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
        self.process = WorkerProcess(options, self.log, nice)  # the child, its pipes, its crash
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
        self.process.closed = False
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
                if self.process.closed or layers == steps[-1]:
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
        """One worker loading `options` (the one before ended)."""
        self.info = None
        self.info = self.process.spawn(options)
        return self.info

    @property
    def alive(self) -> bool:
        return self.process.alive

    @property
    def pid(self) -> int | None:
        return self.process.proc.pid if self.process.proc else None

    @property
    def _proc(self) -> mp.process.BaseProcess | None:
        """The worker's process, while one runs (the fault tests signal it)."""
        return self.process.proc

    def close(self) -> None:
        """End the worker (frees all model and GPU memory). Called from another thread while
        start() runs, that start gives up (EngineError) rather than load or load again. For a
        quit that must not wait, kill() first: the worker then ends whatever it was doing."""
        self.process.close()
        self.info = None

    def kill(self, reason: str = "it did not stop when asked") -> None:
        """Stop a stuck worker at once; the reply in progress then fails, giving `reason`."""
        self.process.kill(reason)

    def __enter__(self) -> LocalEngine:
        if self.info is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def log_path(self) -> Path:
        return self.log.path

    def log_tail(self, lines: int = 8) -> str:
        """The worker log lines worth showing: buffer types and llama.cpp's last lines."""
        return self.log.tail(lines)

    # ---- the Engine interface -----------------------------------------------------------

    def generate(self, request: GenerateRequest) -> Iterator[Event]:
        """Stream one reply's events; raises EngineCrashed if the worker dies."""
        process = self.process
        process.send(Generate(request, time.perf_counter()))  # (one clock for both processes)
        process.replies += 1
        while True:
            msg = process.recv()
            if not isinstance(msg, Events):
                continue
            for event in msg.events:
                if isinstance(event, Finished):
                    self._follow_exact(event)
                yield event
                if isinstance(event, Finished | Failed):
                    return

    def _follow_exact(self, end: Finished) -> None:
        """The info says exact batches once a reply with drafts turned them on."""
        info = self.info
        if info is not None and end.stats.exact_batches and not info.exact_batches:
            self.info = replace(info, exact_batches=True, flash_attn=True)

    def update_settings(self, settings: SamplerSettings) -> None:
        self.process.send(NewSettings(settings))

    def cancel(self) -> None:
        if self.alive:
            self.process.send(Cancel())

    def set_steering(self, steering: Steering) -> None:
        """New steering for the reply in progress (engine/local/inside/context_steering.py);
        between replies the next request's own steering is what counts."""
        self.process.send(NewSteering(steering))

    def residuals(self, texts: list[str], at: str = "mean") -> np.ndarray:
        """Each text's residual stream out of blocks 0..n_layers-2, [texts, layers, n_embd]:
        the mean over its tokens ("mean") or at its last token ("last"); read on the
        inspector's context, so it may run while a reply generates. Raises SteeringError."""
        found = self._side_call(SteerResiduals(tuple(texts), at))
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
        found = self._side_call(SteerMeter(text, units))
        if isinstance(found, str):
            raise SteeringError(found)
        return Meter(tuple(found[0]), found[1], found[2])

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        return self._side_call(Tokenize(text, special))

    def render_prompt(self, request: GenerateRequest) -> tuple[str, str]:
        """The templated prompt text for a request, and a warning if a fallback was used."""
        return self._side_call(RenderPrompt(request))

    def inspect(self, request: InspectRequest) -> Inspection:
        """One capture inside the model (chatapp/engine/inspection.py): made in the worker on a
        second context, so it may run while a reply generates and costs that reply nothing.
        The first one reads weights and fills that context (seconds on a long sequence);
        raises EngineError with a sentence when it cannot be made."""
        found = self._side_call(Inspect(request))
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
        self.process.send(StartAutotune(plan))
        self.process.tune_asked = True
        return True

    def autotune_status(self) -> dict | None:
        """The tune's progress: {"state": "tuning", "done", "total"}, {"state": "done",
        "chosen", ...} (the engine's info then says what runs), {"state": "failed", "error"},
        {"state": "crashed", "error"} when it crashed the worker (remembered: the next start
        does not tune this file), or None when no tune ran."""
        try:
            status = self._side_call(AutotuneStatus())
        except EngineCrashed as exc:
            if self.process.tune_crash:
                return {"state": "crashed", "error": str(exc)}
            raise
        if status is None and self.process.tune_asked:  # sent; the worker has not begun it yet
            return {"state": "tuning", "done": 0, "total": 0}
        if status and status.get("state") == "done" and status.get("info") is not None:
            self.info = replace(status["info"], tuned=True)
        return status

    def score(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of each next token of a text (for perplexity and KL)."""
        self.process.send(Score(list(tokens)))
        while not isinstance(msg := self.process.recv(what="scoring"), Scored):
            pass  # (events a reply left unread)
        if isinstance(msg.result, str):
            raise EngineError(msg.result)
        return msg.result

    def perplexity(self, job: PerplexityJob, progress=None) -> dict:
        """Score a text in chunks as llama-perplexity does (loop/perplexity_scoring.py);
        calls progress(scored, total, seconds) after each chunk."""
        self.process.send(Perplexity(job))
        while True:
            match self.process.recv(what="scoring the text"):
                case PerplexityProgress(done, total, seconds):
                    if progress is not None:
                        progress(done, total, seconds)
                case PerplexityDone(result):
                    if isinstance(result, str):
                        raise EngineError(result)
                    return result
                # (anything else: events a reply left unread)

    def _side_call(self, msg: SideRequest | tuple) -> Any:
        return self.process.side_call(msg)
