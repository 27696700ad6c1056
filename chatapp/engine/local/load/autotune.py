"""Tuned on first use: flash attention on and off, and the thread counts, timed on the loaded
model one decode a step while the worker is idle (a request always goes first: a step in
progress stops at once when one comes), then applied to the main context without reloading
the model, and saved for this file, machine and build.

`chatapp tune` measures more (repack, which needs a reload; more depths and tokens); this is
what a new user gets without knowing it exists. Each configuration decodes on a scratch
context of its own, so the main context's KV cache (the conversation) is never touched."""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatapp import ceilings, machine
from chatapp.cpu_load import OtherPrograms, share_of_cpu
from chatapp.engine.local.load import stop_flag, tune_measurements

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel

DECODE_TOKENS = 12  # tokens timed per configuration, depth and round (after one untimed)
ROUNDS = 2  # each configuration is timed this often at each depth, interleaved
DEEP = 512  # the deeper depth, where flash attention's worth shows on a CPU
PREFILL_BUDGET_S = 4.0  # a slow model stops prefilling here: its deep depth is where it got
SLICE_S = 0.1  # a prefill chunk's aim (a step stops sooner when a request comes)
SCRATCH_CTX = 1024  # cells of a scratch context: attends as a chat's does up to DEEP + tokens
BUSY_SHARE = 0.25  # other programs used more of the CPUs than this: applied, not saved
BUSY_ENV = "CHATAPP_AUTOTUNE_BUSY_SHARE"  # tests on a shared machine raise the bar
TIMELINE = 4000  # turns kept: the tune's steps and the requests served between them


@dataclass
class Trial:
    """One configuration's decode times at depth 0 and at the deep depth, over its rounds."""

    flash_attn: bool
    threads: int
    times: dict[int, list[float]] = field(default_factory=dict)  # seconds per token, by depth

    @property
    def rates(self) -> dict[int, float]:
        """Tokens/s at each depth: over the median token, so a burst of another program's
        work in a few of them moves nothing."""
        return {d: 1.0 / statistics.median(ts) for d, ts in self.times.items() if ts}

    @property
    def score(self) -> float:
        """Geometric mean over the depths, as `chatapp tune` scores."""
        return tune_measurements.depth_score(self.rates)

    def label(self) -> str:
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return f"flash attention {'on' if self.flash_attn else 'off'}, {threads}"


class AutoTune:
    """The measurement as a generator of steps, one decode each: `step()` does one and says
    whether more remain; `status` is read by the side pipe's thread (a new dict each time,
    never mutated). `stop_flag`: a flag (stop_flag.py) that, once set, stops the step's decode
    where it is (the worker's parent sets it when it sends a request); the decode is made
    again at the next step. `timeline`: (what, start, end, threads) of each step ("step", or
    "stopped" for one cut short) and of each request served between them ("generate", ...,
    with the threads the main context had), in order, on the clock of time.perf_counter."""

    def __init__(
        self,
        w: LoadedModel,
        free: dict[str, bool],
        n_gpu_layers: int,
        stop_flag: ctypes.Array[ctypes.c_byte] | None = None,
    ) -> None:
        self.w = w
        self.n_gpu_layers = n_gpu_layers
        self.stop_flag = stop_flag
        self._watchers: list = []  # the scratch contexts' abort callbacks, kept alive
        self.timeline: deque[tuple[str, float, float, int]] = deque(maxlen=TIMELINE)
        self._stopped = False
        current = w.info
        fas = [False, True] if free.get("flash_attn") else [bool(current.flash_attn)]
        threads = tune_measurements.thread_counts() if free.get("threads") else [current.n_threads]
        self.trials = [Trial(fa, t) for fa in fas for t in threads]
        self.total = len(self.trials) * 2 * ROUNDS
        self.done = 0
        self.status: dict = {"state": "tuning", "done": 0, "total": self.total}
        self._steps = self._run()

    def step(self) -> bool:
        """One step; False when the tune has ended (applied, or failed: see status)."""
        t0, self._stopped = time.perf_counter(), False
        try:
            next(self._steps)
            more = True
        except StopIteration:
            more = False
        except Exception as exc:  # a tune that fails leaves the model as it was
            self.status = {"state": "failed", "error": str(exc)}
            more = False
        self.timeline.append(("stopped" if self._stopped else "step", t0, time.perf_counter(), 0))
        if not more and self.status.get("state") == "done":
            self.status = {**self.status, "timeline": list(self.timeline)}
        return more

    def served(self, kind: str, start: float, end: float, threads: int) -> None:
        """A request was served between two steps, the main context on `threads`."""
        self.timeline.append((kind, start, end, threads))

    def stop(self) -> None:
        self._steps.close()  # frees a scratch context still open

    def _run(self) -> Generator[None, None, None]:
        self._others = OtherPrograms(children=False)
        ids = self._filler(DEEP + DECODE_TOKENS + 2)
        # One scratch context per flash attention setting, both open, and the trials taken
        # in turn: timed in separate stretches, a machine whose speed drifts (a shared host)
        # decides between them instead of the settings (on the 2-core EPYC, flash attention
        # off then on in two stretches chose off where llama-bench found on as fast or faster
        # at every depth with 256 tokens).
        contexts: dict[bool, object] = {}
        try:
            for fa in sorted({t.flash_attn for t in self.trials}):
                contexts[fa] = self._scratch(fa)
                yield
            yield from self._measure(contexts, ids)
        finally:
            for ctx in contexts.values():
                self.w.lib.llama_free(ctx)
        yield from self._ceilings()
        self._finish()

    def _ceilings(self) -> Generator[None, None, None]:
        """The machine's speed ceilings with the thread count the tune chose (chatapp
        machine shows them; a reply's limits are held against them), kept at the best
        measured: one measured beside other work reads low and raises nothing."""
        best = max(self.trials, key=lambda t: t.score)
        found = yield from ceilings.measure_in_steps(best.threads)
        machine.remember_ceilings(ceilings.best_of(machine.saved_ceilings(), found))

    def _measure(self, contexts: dict[bool, object], ids: list[int]) -> Iterator[None]:
        lib = self.w.lib
        mems = {fa: lib.llama_get_memory(ctx) for fa, ctx in contexts.items()}
        for _ in range(ROUNDS):  # depth 0
            for trial in self.trials:
                lib.llama_memory_clear(mems[trial.flash_attn], True)
                yield from self._time(contexts[trial.flash_attn], trial, 0, ids)
        depth = DEEP
        for fa, ctx in contexts.items():  # the same depth in each (a slow model: less)
            lib.llama_memory_clear(mems[fa], True)
            depth = yield from self._fill(ctx, ids, depth)
        for fa in contexts:
            lib.llama_memory_seq_rm(mems[fa], -1, depth, -1)
        for _ in range(ROUNDS):
            for trial in self.trials:
                mem = mems[trial.flash_attn]
                lib.llama_memory_seq_rm(mem, -1, depth, -1)  # back to the same depth each time
                yield from self._time(contexts[trial.flash_attn], trial, depth, ids)

    def _fill(self, ctx, ids: list[int], limit: int) -> Generator[None, None, int]:
        """Prefill a scratch context up to `limit` tokens, a chunk a step, within PREFILL_BUDGET_S
        of its own decoding (replies served meanwhile do not count); returns the depth reached."""
        depth, chunk, spent = 0, 4, 0.0
        while depth < limit and spent < PREFILL_BUDGET_S:
            n = min(chunk, limit - depth)
            took = yield from self._decoded(ctx, ids[depth : depth + n], depth)
            depth += n
            spent += took
            chunk = max(1, min(256, int(n * SLICE_S / max(took, 1e-6))))
        return depth

    def _time(self, ctx, trial: Trial, depth: int, ids: list[int]) -> Iterator[None]:
        self.w.lib.llama_set_n_threads(ctx, trial.threads, trial.threads)
        # untimed: the new thread count's first step
        yield from self._decoded(ctx, [ids[depth]], depth)
        times = trial.times.setdefault(depth, [])
        for pos in range(depth + 1, depth + 1 + DECODE_TOKENS):
            times.append((yield from self._decoded(ctx, [ids[pos]], pos)))
        self.done += 1
        self.status = {"state": "tuning", "done": self.done, "total": self.total}

    def _decoded(self, ctx, tokens: list[int], pos: int) -> Generator[None, None, float]:
        """Decode `tokens` at `pos` of a scratch context as one step; a decode stopped by the
        flag is dropped from the context and made again at the next step. The seconds that the
        decode which ran whole took."""
        lib = self.w.lib
        while True:
            took = _decode(lib, ctx, tokens)
            if took is not None:
                yield
                return took
            self._stopped = True
            lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), -1, pos, -1)
            yield

    def _scratch(self, flash_attn: bool):
        lib = self.w.lib
        params = lib.llama_context_default_params()
        params.n_ctx = SCRATCH_CTX
        params.n_batch = params.n_ubatch = 256
        params.n_seq_max = 1
        params.flash_attn_type = (
            lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        ctx = lib.llama_init_from_model(self.w.model, params)
        if not ctx:
            raise RuntimeError("llama.cpp could not make a scratch context to tune on")
        if self.stop_flag is not None:
            self._watchers.append(stop_flag.watch(lib, ctx, self.stop_flag))
        return ctx

    def _filler(self, n: int) -> list[int]:
        ids = self.w.tokenize(tune_measurements.TEXT * (2 + n // 30), add_bos=False, special=False)
        return (ids * (1 + n // max(len(ids), 1)))[:n]

    def _finish(self) -> None:
        ranked = sorted(self.trials, key=lambda t: t.score, reverse=True)
        best, worst = ranked[0], ranked[-1]
        if best.score <= 0:
            raise RuntimeError("no configuration decoded")
        info = self.w.info
        now = (bool(info.flash_attn), info.n_threads)
        current = next((t for t in self.trials if (t.flash_attn, t.threads) == now), None)
        self.w.reconfigure(best.flash_attn, best.threads)
        depths = sorted({d for t in self.trials for d in t.rates})
        busy = share_of_cpu(self._others())
        saved = busy is None or busy <= float(os.environ.get(BUSY_ENV, BUSY_SHARE))
        if saved:
            self._save(best, depths)
        self.status = {
            "state": "done",
            "chosen": best.label(),
            "flash_attn": best.flash_attn,
            "threads": best.threads,
            "saved": saved,
            "others_busy": busy,
            "gain_over_slowest": best.score / worst.score if worst.score else None,
            "gain_over_before": best.score / current.score if current and current.score else None,
            "trials": [
                {"flash_attn": t.flash_attn, "threads": t.threads, "decode_tps": t.rates}
                for t in self.trials
            ],
            "info": self.w.info,
        }

    def _save(self, best: Trial, depths: list[int]) -> None:
        machine.remember_tuned(
            self.w.options.model_path,
            {
                "flash_attn": best.flash_attn,
                "threads": best.threads,
                "repack": self.w.info.repack,
                "n_gpu_layers": self.n_gpu_layers,
                "gpu_offload": self.w.info.gpu_offload_supported,
                "decode_tps": {str(d): round(r, 1) for d, r in best.rates.items()},
                "depths": depths,
                "auto": True,
            },
        )


ABORTED = 2  # llama_decode's code for a decode its abort callback stopped


def _decode(lib, ctx, tokens: list[int]) -> float | None:
    """Decode tokens at the end of the scratch context's sequence; the seconds it took, or None
    when the stop flag stopped it."""
    arr = (ctypes.c_int32 * len(tokens))(*tokens)
    t0 = time.perf_counter()
    code = lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(tokens)))
    lib.llama_synchronize(ctx)
    if code == ABORTED:
        return None
    if code != 0:
        raise RuntimeError(f"llama_decode failed while tuning (code {code})")
    return time.perf_counter() - t0
