"""The fake engines: a scripted one for fast, deterministic UI tests (the real path is tested
on llama.cpp), one with fixed replies, one that never loads, one that emits hostile text."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np

from chatapp.engine.capabilities import NOTHING, Capabilities
from chatapp.engine.inspection import Inspection, InspectRequest, LayerLens, Neighbour, Ranked
from chatapp.engine.protocol import (
    Candidate,
    ChatMessage,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    PromptEvaluated,
    SettingsApplied,
    StopReason,
    Token,
    TokenPiece,
)
from chatapp.metrics import GenerationStats, stats_from_times
from chatapp.sampling import SamplerSettings

WORDS = "The sea is calm tonight . The tide is full , the moon lies fair upon the straits".split()


PINNED_START = 1000.0  # the made-up clock of pinned_gaps starts here (seconds)


class ScriptedEngine:
    """Replies with the words above, one token per word, `delay` seconds apart."""

    # No steering: set_steering only keeps what it is given (no residuals, no meter).
    capabilities = Capabilities(live_settings=True, inside=True, candidates=True, tokenize=True)

    def __init__(
        self,
        delay: float = 0.002,
        words: list[str] | None = None,
        fail_with: str | None = None,
        pinned_stats: GenerationStats | None = None,
        pinned_gaps: tuple[float, ...] = (),
        paint_gate: threading.Event | None = None,
        n_ctx: int = 2048,
    ) -> None:
        self.n_ctx = n_ctx
        self.pinned_stats = pinned_stats
        # Token times on a made-up clock, for pictures that must not change: token n comes
        # pinned_gaps[n % len] seconds after the one before (the real clock when empty).
        self.pinned_gaps = pinned_gaps
        # Set by the test's app when a reply's first token is painted: the engine waits for it
        # after that token, so the first paint always comes before the reply's end.
        self.paint_gate = paint_gate
        self.delay = delay
        self.words = words or WORDS
        self.fail_with = fail_with
        self.info: ModelInfo | None = None
        self._cancel = threading.Event()
        self._settings: SamplerSettings | None = None
        self.requests: list[GenerateRequest] = []
        self.inspections: list[InspectRequest] = []
        self._alive = False
        self.notes: list[str] = []
        self.killed: str | None = None

    def start(self) -> ModelInfo:
        self._alive = True
        self.info = ModelInfo(
            path="/models/scripted.gguf",
            n_vocab=1000,
            n_ctx=self.n_ctx,
            n_ctx_train=2048,
            load_s=0.01,
            gpu_offload_supported=False,
            n_gpu_layers=0,
            n_layers=4,
            n_threads=1,
            has_chat_template=True,
            quant="Q4_1",
            architecture="llama",
        )
        return self.info

    def _piece(self, i: int) -> bytes:
        return (" " + self.words[i % len(self.words)]).encode()

    def generate(self, request: GenerateRequest) -> Iterator:
        self.requests.append(request)
        self._cancel.clear()
        # With pinned gaps the whole clock is made up, from a fixed start: token intervals
        # computed from perf_counter's ever larger values round differently as the machine's
        # uptime grows, and a sparkline colour moved by one unit between runs.
        t0 = PINNED_START if self.pinned_gaps else time.perf_counter()
        start = TokenPiece(1, b"<|im_start|>", special=True)
        prompt = [start, TokenPiece(2, b"user"), TokenPiece(3, b"\n")]
        for m in request.messages:
            prompt += [TokenPiece(100 + i, w.encode()) for i, w in enumerate(m.content.split())]
        prefill_s = self.pinned_stats.prefill_s if self.pinned_stats else 0.001
        yield PromptEvaluated(
            tuple(prompt), "<|im_start|>user\n...", len(prompt), 0, prefill_s,
            t0 + prefill_s if self.pinned_gaps else time.perf_counter(),
        )  # fmt: skip
        if self.fail_with:
            yield Failed(self.fail_with)
            return
        settings = request.settings
        times = []
        text = "".join(TokenPiece(i, self._piece(i)).text for i in request.reply_prefix_ids)
        start = len(request.reply_prefix_ids)
        reason = StopReason.MAX_TOKENS
        if self.paint_gate is not None:
            self.paint_gate.clear()
        for n in range(start, start + settings.max_tokens):
            if n == start + 1 and self.paint_gate is not None:
                self.paint_gate.wait(timeout=10)
            if self._cancel.is_set():
                reason = StopReason.CANCELLED
                break
            if self._settings is not None:
                settings, self._settings = self._settings, None
                yield SettingsApplied(settings, n)
            if n >= len(self.words) * 2:
                reason = StopReason.EOG
                break
            time.sleep(self.delay)
            if self.pinned_gaps:
                t = (times[-1] if times else t0) + self.pinned_gaps[n % len(self.pinned_gaps)]
            else:
                t = time.perf_counter()
            times.append(t)
            piece = self._piece(n)
            cands = tuple(
                Candidate(
                    n + k,
                    self._piece(n + k),
                    0.5 / (k + 1),
                    0.6 / (k + 1),
                    # a grammar cuts the 2nd, top-p the 4th, top-k the rest
                    cut_by=_scripted_cut(k, request.grammar is not None),
                )
                for k in range(6)
            )
            text += piece.decode()
            yield Token(n, n, piece, piece.decode(), t, -0.69, cands)
        stats = stats_from_times(
            t_request=t0,
            t_prefill_start=t0,
            t_prefill_end=t0 + 0.001,
            token_times=times,
            prompt_tokens=len(prompt),
            prompt_evaluated=len(prompt),
            n_past=len(prompt) + len(times),
            n_ctx=2048,
        )
        yield Finished(reason, text, self.pinned_stats or stats)

    def update_settings(self, settings: SamplerSettings) -> None:
        self._settings = settings

    def set_steering(self, steering) -> None:
        self.steering = steering  # (a script has no layers: only kept, for tests to read)

    def cancel(self) -> None:
        self._cancel.set()

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        return [
            TokenPiece(i, (" " if i else "").encode() + w.encode())
            for i, w in enumerate(text.split())
        ]

    def kill(self, reason: str = "it did not stop when asked") -> None:
        self.killed = reason
        self._cancel.set()

    def count_tokens(self, messages: list[ChatMessage]) -> int | None:
        return sum(len(m.content.split()) + 4 for m in messages)

    def inspect(self, request: InspectRequest) -> Inspection:
        """A made-up capture of 4 layers and 2 heads: attention falls on the first token and
        the one before; the chosen token forms at layer 3."""
        self.inspections.append(request)
        tokens = tuple(request.tokens) or (0, 1, 2)
        pos = request.position % len(tokens)
        chosen = request.chosen if request.chosen is not None else 7
        piece = f" {WORDS[chosen % len(WORDS)]}".encode()
        layers = []
        for i, p in enumerate((0.0, 0.01, 0.05, 0.6, 0.9, 0.92)):
            name = "embedding" if i == 0 else "final" if i == 5 else f"layer {i}"
            top = (Ranked(chosen, piece, p), Ranked(3, b" is", (1 - p) / 2))
            layers.append(LayerLens(i, name, top if p > 0.3 else top[::-1], 1 if p > 0.3 else 2, p))
        att = np.zeros((4, 2, pos + 1), np.float32)
        att[:, :, 0] = 0.7
        att[:, :, pos] += 0.3
        return Inspection(
            position=pos,
            tokens=tokens[: pos + 1],
            pieces=tuple(f" {WORDS[t % len(WORDS)]}".encode() for t in tokens[: pos + 1]),
            chosen=Ranked(chosen, piece, 0.92),
            layers=tuple(layers),
            attention=att,
            neighbours=(Neighbour(5, b" sea", 0.8), Neighbour(6, b" tide", 0.7)),
            n_head_kv=1,
            lens_ok=True,
            timings={"total_ms": 1.0},
        )

    @property
    def alive(self) -> bool:
        return self._alive

    def close(self) -> None:
        self._alive = False


def _scripted_cut(k: int, grammar: bool) -> str:
    """Which step cut the k-th scripted candidate."""
    if grammar and k == 1:
        return "grammar"
    return "top_k" if k >= 4 else "top_p" if k == 3 else ""


# ---- fixed, broken and hostile engines ----------------------------------


class FakeEngine:
    """Stands in for LocalEngine: fixed replies and log-probs, chosen by the file's name."""

    vocab = 16
    capabilities = Capabilities(tokenize=True, scoring=True)

    def __init__(self, opts):
        self.path = opts.model_path
        self.pid = os.getpid()

    def start(self):
        if "broken" in self.path:
            raise EngineError(f"could not load {self.path}")
        return ModelInfo(self.path, self.vocab, 1024, 2048, 0.01, False, 0, 1, 1, True)

    def generate(self, request):
        n = request.settings.max_tokens
        for i in range(n):
            yield Token(i, 3 if "noisy" in self.path and i > 1 else 1, b"a", "a", float(i))
        stats = GenerationStats(10, 10, n, 0.1, 0.05, 0.2, 10 + n, 1024)
        yield Finished(StopReason.MAX_TOKENS, "a" * n, stats)

    def tokenize(self, text, special=True):
        shift = 1 if "othertok" in self.path else 0
        return [TokenPiece((i + shift) % self.vocab, b"x") for i in range(40)]

    def score(self, tokens):
        rng = np.random.default_rng(7)
        logits = rng.normal(size=(len(tokens) - 1, self.vocab))
        if "noisy" in self.path:
            logits += np.random.default_rng(8).normal(scale=2.0, size=logits.shape)
        return (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).astype(np.float32)

    def close(self):
        pass


class BrokenEngine:
    """An engine whose model never loads (a file llama.cpp refuses after the header check)."""

    pid = None
    capabilities = NOTHING

    def __init__(self, opts: LoadOptions) -> None:
        self.opts = opts

    def start(self):
        raise EngineError(f"could not load {self.opts.model_path}: llama.cpp refused it")

    def close(self) -> None:
        pass


# What a model (or a server's JSON) may emit, and what a user may paste: each must be shown as
# visible symbols, never reach the terminal raw.
HOSTILE = [
    "\x1b[31mred\x1b[0m",  # SGR colour
    "\x1b]0;pwned\x07",  # OSC: set the window title
    "\x1b[2J\x1b[H",  # clear the screen, cursor home
    "nul\x00byte",
    "bell\x07",
    "\x9b31mC1",  # 8-bit CSI
    "lone\ud800surrogate",  # from JSON "\ud800", or argv that is not UTF-8
    "back\x08space",
    "carriage\rreturn",
    "del\x7f",
]


class HostileEngine(ScriptedEngine):
    """Replies with the HOSTILE words, one token each."""

    def generate(self, request: GenerateRequest):
        self.requests.append(request)
        t0 = time.perf_counter()
        yield PromptEvaluated(
            (TokenPiece(1, b"\x1b[2J"), TokenPiece(2, b"user")), "", 2, 0, 0.001, t0
        )
        times, parts = [], []
        for n, word in enumerate(HOSTILE):
            piece = (" " + word).encode("utf-8", "surrogatepass")
            cand = Candidate(n, piece, 0.5, 0.6)
            times.append(time.perf_counter())
            parts.append(" " + word)
            yield Token(n, n, piece, " " + word, times[-1], -0.69, (cand,))
        stats = stats_from_times(
            t_request=t0, t_prefill_start=t0, t_prefill_end=t0 + 0.001, token_times=times,
            prompt_tokens=2, prompt_evaluated=2, n_past=2 + len(times), n_ctx=2048,
        )  # fmt: skip
        yield Finished(StopReason.EOG, "".join(parts), stats)
