"""What every reply loop shares: the pipe, prefill, grammar start, new settings, the stats."""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from chatapp.cpus import usable_cores
from chatapp.engine.candidate_rows import settle
from chatapp.engine.local.loop.grammar_sampler import GrammarSampler, GrammarUnusable, start_grammar
from chatapp.engine.local.loop.row_sampling import ReplySampler
from chatapp.engine.local.pipe_messages import (
    Cancel,
    Close,
    Command,
    Events,
    NewSettings,
    NewSteering,
    StartAutotune,
)
from chatapp.engine.protocol import (
    Failed,
    GenerateRequest,
    PrefillProgress,
    PromptEvaluated,
    SettingsApplied,
    Token,
    fills_the_cpu,
)
from chatapp.metrics import GenerationStats, stats_from_times
from chatapp.sampling import SamplerSettings

if TYPE_CHECKING:
    from chatapp.engine.local.loop.serving_model import ServingModel
    from chatapp.engine.steering import Steering

# Token events go at most every 50 ms (the first one at once): each send pickles, writes and
# wakes the reader, and 20 updates a second reads as smooth text. Where llama.cpp's threads
# fill every core, every 100 ms: each batch then costs the decode ~0.3 ms of CPU whatever its
# size (the write, the reader's wake-up and unpickling, all with the caches cold: 2-core
# EPYC, 6 tokens a batch: ~60 us a token in the two processes), and the TUI paints text no
# more often than that there (ui/streaming.py's LIGHT cadence).
FLUSH_S = 0.05
FLUSH_CPU_S = 0.1
EMPTY_PROMPT = "the prompt is empty (no tokens to continue from): write some text and send it again"


def message_waiting(conn: Connection):
    """A check, made once per reply, of whether the parent has sent something.

    Connection.poll() builds a selector per call (~80 us with the caches cold after a decode,
    every token); one poll object registered once costs a single syscall. Where select.poll
    is missing (Windows) the Connection's own poll is used."""
    if not hasattr(select, "poll"):
        return conn.poll
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return lambda: bool(poller.poll(0))


class ReplyLoop:
    """One request's loop in the worker, one reply or several decoded together: events out
    (batched), cancel, settings and steering in between tokens. A subclass's _run samples."""

    def __init__(self, worker: ServingModel, conn: Connection, req: GenerateRequest) -> None:
        self.w = worker
        self.conn = conn
        self.req = req
        self.settings = req.settings
        self.pending: list = []
        self.last_flush = 0.0
        self.flush_s = FLUSH_CPU_S if fills_the_cpu(worker.info, usable_cores()) else FLUSH_S
        self.cancelled = False
        self.new_settings: SamplerSettings | None = None
        self.new_steering: Steering | None = None  # sent mid-reply (inside/context_steering.py)
        self.tune_asked: dict | None = None  # the tune on first use, asked for mid-reply
        self.tune_wait_since: float | None = None  # sent while a tune was on: when it was sent
        self.has_message = message_waiting(conn)

    def send(self, event, flush: bool = False) -> None:
        self.pending.append(event)
        now = time.perf_counter()
        if flush or now - self.last_flush >= self.flush_s:
            settle(e.candidates for e in self.pending if isinstance(e, Token))
            self.conn.send(Events(self.pending))
            self.pending = []
            self.last_flush = now

    def check_pipe(self) -> None:
        """Take what the parent sent since the last look (pipe_messages.py's commands)."""
        while self.has_message():
            msg: Command = self.conn.recv()
            match msg:
                case Cancel() | Close():
                    self.cancelled = True
                case NewSettings(settings):
                    self.new_settings = settings
                case NewSteering(steering):
                    self.new_steering = steering
                case StartAutotune(plan):  # begins once the reply is over (worker.serve)
                    self.tune_asked = plan

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # report, keep the worker alive
            self.send(Failed(f"generation failed: {type(exc).__name__}: {exc}"), flush=True)

    def prefill(self, full: list[int], prompt_ids: list[int], rendered: str):
        """Evaluate what the KV cache lacks of `full` and report it (PromptEvaluated, and
        PrefillProgress per batch when it takes more than one); returns (tokens evaluated,
        when it ended), or None after reporting a failure."""
        w = self.w
        if not full:  # (a raw prompt of no text, on a model that adds no BOS token)
            self.send(Failed(EMPTY_PROMPT), flush=True)
            return None
        t_prefill = time.perf_counter()
        n_reused = w.reuse_prefix([-1] if self.req.fresh_cache else full)  # [-1]: nothing shared
        n_new = len(full) - n_reused
        progress = None
        if n_new > w.n_batch:  # more than one batch: say how far it got (a long silent wait
            # reads as a crash)
            progress = lambda done: self.send(  # noqa: E731
                PrefillProgress(done, n_new, time.perf_counter() - t_prefill), flush=True
            )
        # The last prompt token is always evaluated on its own, so its logits are computed the
        # same way whether the rest came from the cache or not: a seed then reproduces exactly.
        code = w.decode(full[n_reused:-1], progress=progress) or w.decode_one(full[-1])
        t_end = time.perf_counter()
        if code != 0:
            w.kv_tokens = []
            w.lib.llama_memory_clear(w.mem, True)
            self.send(Failed(f"llama_decode failed on the prompt (code {code})"), flush=True)
            return None
        self.send(
            PromptEvaluated(
                tokens=tuple(w.pieces(prompt_ids)),
                rendered=rendered,
                n_new=n_new,
                n_reused=n_reused,
                prefill_s=t_end - t_prefill,
                t=t_end,
            ),
            flush=True,
        )
        return n_new, t_end

    def _run(self) -> None:
        raise NotImplementedError

    def start_grammars(self, n: int, prefix: list[int]) -> list[GrammarSampler | None] | None:
        """A grammar state for each of n replies (None each without a grammar) after the
        reply's `prefix`; None after reporting why the grammar cannot be used."""
        try:
            return [start_grammar(self.w, self.req, prefix) for _ in range(n)]
        except GrammarUnusable as exc:
            self.send(Failed(str(exc)), flush=True)
            return None

    def take_new_settings(
        self, samplers: Callable[[], Iterable[tuple[ReplySampler, list[int]]]], index: int
    ) -> SamplerSettings | None:
        """Settings sent mid-reply, if any came: each reply's chain remade on its history
        (`samplers()` gives them), reported as applied from token `index`."""
        s = self.new_settings
        if s is None:
            return None
        self.new_settings = None
        for sampler, history in samplers():
            sampler.restart(s, history)
        self.send(SettingsApplied(s, index), flush=True)
        return s

    def stats(
        self,
        times: tuple[float, float, float],
        token_times: list[float],
        prompt_tokens: int,
        prompt_evaluated: int,
        **more,
    ) -> GenerationStats:
        """The reply's stats: `times` are when the request came, prefill began and ended."""
        t_request, t_prefill, t_prefill_end = times
        if self.tune_wait_since is not None:  # the tune's step it came in
            more["tune_wait_s"] = max(0.0, t_request - self.tune_wait_since)
        return stats_from_times(
            t_request=t_request,
            t_prefill_start=t_prefill,
            t_prefill_end=t_prefill_end,
            token_times=token_times,
            prompt_tokens=prompt_tokens,
            prompt_evaluated=prompt_evaluated,
            n_past=len(self.w.kv_tokens),
            n_ctx=self.w.n_ctx,
            **more,
        )
