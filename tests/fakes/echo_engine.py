"""A whole engine backend in one file (docs/add-a-backend.md): it echoes the last message."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from chatapp.engine.capabilities import Capabilities
from chatapp.engine.inspection import InsideUnavailable, Inspection, InspectRequest
from chatapp.engine.protocol import (
    ChatMessage,
    Event,
    Failed,
    Finished,
    GenerateRequest,
    ModelInfo,
    PromptEvaluated,
    StopReason,
    Token,
    TokenPiece,
)
from chatapp.engine.steering import Steering, SteeringUnavailable
from chatapp.metrics import stats_from_times
from chatapp.sampling import SamplerSettings


class EchoEngine:
    """Replies with the user's last message, one word a token. It can cut text into tokens
    and take a raw prompt; it cannot steer, look inside or give probabilities."""

    capabilities = Capabilities(tokenize=True, raw_prompt=True)

    def __init__(self, n_ctx: int = 2048) -> None:
        self.info: ModelInfo | None = None
        self.notes: list[str] = []
        self.n_ctx = n_ctx
        self.asked: list[str] = []  # the methods called beyond chatting (for the test)
        self._cancel = threading.Event()

    @property
    def alive(self) -> bool:
        return self.info is not None

    def start(self) -> ModelInfo:
        self.info = ModelInfo(
            path="echo", n_vocab=0, n_ctx=self.n_ctx, n_ctx_train=self.n_ctx, load_s=0.0,
            gpu_offload_supported=False, n_gpu_layers=0, n_layers=0, n_threads=1,
            has_chat_template=False, description="echoes the last message",
        )  # fmt: skip
        return self.info

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        words = text.split(" ")
        return [TokenPiece(i, (" " * bool(i) + w).encode()) for i, w in enumerate(words)]

    def count_tokens(self, messages: list[ChatMessage]) -> int | None:
        return sum(len(self.tokenize(m.content)) for m in messages)

    def generate(self, request: GenerateRequest) -> Iterator[Event]:
        if self.info is None:
            yield Failed("the echo engine is not started")
            return
        self._cancel.clear()
        t_request = time.perf_counter()
        prompt = request.raw_prompt or (request.messages[-1].content if request.messages else "")
        tokens = tuple(self.tokenize(prompt))
        yield PromptEvaluated(tokens, prompt, len(tokens), 0, 0.0, time.perf_counter())
        times: list[float] = []
        reason = StopReason.EOG
        for i, piece in enumerate(tokens):
            if self._cancel.is_set():
                reason = StopReason.CANCELLED
                break
            if i >= request.settings.max_tokens:
                reason = StopReason.MAX_TOKENS
                break
            times.append(time.perf_counter())
            yield Token(i, piece.id, piece.piece, piece.text, times[-1])
        stats = stats_from_times(
            t_request=t_request, t_prefill_start=t_request, t_prefill_end=t_request,
            token_times=times, prompt_tokens=len(tokens), prompt_evaluated=len(tokens),
            n_past=len(tokens) + len(times), n_ctx=self.n_ctx,
        )  # fmt: skip
        text = "".join(p.text for p in tokens[: len(times)])
        yield Finished(reason, text, stats)

    def update_settings(self, settings: SamplerSettings) -> None:
        """Capabilities.live_settings is False: the app sends settings with the next request."""

    def set_steering(self, steering: Steering) -> None:
        self.asked.append("set_steering")
        raise SteeringUnavailable("the echo engine has no layers to steer")

    def inspect(self, request: InspectRequest) -> Inspection:
        self.asked.append("inspect")
        raise InsideUnavailable("the echo engine has no layers to look inside")

    def cancel(self) -> None:
        self._cancel.set()

    def kill(self, reason: str = "it did not stop when asked") -> None:
        self._cancel.set()

    def close(self) -> None:
        self.info = None
