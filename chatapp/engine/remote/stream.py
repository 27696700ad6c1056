"""One streamed reply from a server: the request body, the SSE objects, tokens, stop and stats."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx

from chatapp.engine.protocol import (
    Event,
    Finished,
    GenerateRequest,
    PromptEvaluated,
    StopReason,
    Token,
    TokenPiece,
)
from chatapp.engine.remote.flavours import Flavour, flavour_of
from chatapp.engine.remote.sse import iter_sse
from chatapp.engine.remote.tokens import pieces_from_choice
from chatapp.metrics import stats_from_times
from chatapp.sampling import SAMPLERS, SamplerSettings

MAX_TOP_LOGPROBS = 20  # OpenAI's limit, and vLLM's default max_logprobs
MALFORMED = "the server sent a malformed stream event after {n}"


def body_for(
    request: GenerateRequest,
    settings: SamplerSettings,
    model: str | None,
    kind: str | Flavour,
    logprobs: bool,
) -> dict:
    """The JSON body of a streamed chat (or, for a raw prompt, text) completion.

    Stop strings are not sent: they are found client-side, so a reply that ends on one is
    told apart from one that ends on the model's end token (servers say "stop" for both).
    """
    flavour = flavour_of(kind)
    body: dict = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampler_fields(settings, flavour),
    }
    if request.ignore_eos:
        body["ignore_eos"] = True
    if request.grammar is not None:  # generate() asked flavour.grammar first
        body["grammar"] = request.grammar.gbnf
    n = min(request.top_n, MAX_TOP_LOGPROBS)
    if request.raw_prompt is None:
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
        if logprobs and n > 0:
            body["logprobs"] = True
            body["top_logprobs"] = n
    else:
        body["prompt"] = request.raw_prompt
        if logprobs and n > 0:
            body["logprobs"] = n
    if logprobs and n > 0 and flavour.post_sampling_probs:
        body["post_sampling_probs"] = True  # what its samplers kept, with their probabilities
    return body


def sampler_fields(s: SamplerSettings, kind: str | Flavour) -> dict:
    """The sampler settings in a request body, by the sampler table's server names as the
    server's flavour spells them (top-k, min-p and the repeat penalty are not in OpenAI's API;
    llama-server, the llama-cpp-python server and vLLM take them; vLLM has its own names and
    -1 for no top-k)."""
    flavour = flavour_of(kind)
    body = {}
    for row in SAMPLERS:
        if row.server is not None and flavour.takes(row):
            body[flavour.key(row.server)] = getattr(s, row.name)
    if s.top_k == 0 and "top_k" in body:
        body["top_k"] = flavour.top_k_off
    return body


def finish_reason(value: str | None, n_past: int, n_ctx: int) -> tuple[StopReason, str]:
    """StopReason and detail for an OpenAI finish_reason."""
    if value == "stop":
        return StopReason.EOG, ""
    if value == "length":
        full = n_ctx > 0 and n_past >= n_ctx
        return (StopReason.CONTEXT_FULL if full else StopReason.MAX_TOKENS), ""
    if value in ("tool_calls", "function_call"):
        return StopReason.EOG, value
    if value is None:
        return StopReason.ERROR, "the server ended the stream without a finish reason"
    return StopReason.ERROR, f"finish reason {value!r}"


def _valid(obj: dict) -> bool:
    choices = obj.get("choices", [])
    return isinstance(choices, list) and all(isinstance(c, dict) for c in choices)


def sse_objects(resp: httpx.Response) -> Iterator[dict | str | None]:
    """The JSON objects of a streamed reply; None for [DONE]; a sentence for a malformed one.

    An `event: error` is turned into {"error": ...}. A server that answers with one JSON
    body instead of a stream is read as a single chunk.
    """
    ctype = resp.headers.get("content-type", "")
    if "json" in ctype and "event-stream" not in ctype:
        try:
            data = json.loads(resp.read())
        except ValueError:
            data = None
        if not isinstance(data, dict) or not _valid(data):
            yield MALFORMED
            return
        if "error" not in data:
            data["choices"] = [
                {**c, "delta": c.get("message") or {}} if "message" in c else c
                for c in data.get("choices", [])
            ]
        yield data
        yield None
        return
    for ev in iter_sse(resp.iter_lines()):
        data = ev.data.strip()
        if data == "[DONE]":
            yield None
            return
        try:
            obj = json.loads(data)
        except ValueError:
            yield {"error": data} if ev.event == "error" else MALFORMED
            return
        if ev.event == "error":
            yield obj if isinstance(obj, dict) and "error" in obj else {"error": obj}
            return
        if not isinstance(obj, dict) or not _valid(obj):
            yield MALFORMED
            return
        yield obj


class StreamState:
    """What one reply has received so far; turns chunks into events."""

    def __init__(
        self,
        request: GenerateRequest,
        settings: SamplerSettings,
        rendered: str,
        tokens: tuple[TokenPiece, ...],
        exact: bool,
        n_ctx: int,
    ) -> None:
        self.request, self.settings = request, settings
        self.rendered, self.tokens, self.exact, self.n_ctx = rendered, tokens, exact, n_ctx
        self.t_request = time.perf_counter()
        self.times: list[float] = []
        self.parts: list[str] = []
        self.finish_raw: str | None = None
        self.timings: dict = {}
        self.usage: dict = {}
        self.stopped = False
        self.detail = ""
        self._announced = False
        self._stops = tuple(s for s in request.stop if s)
        self._max_stop = max((len(s) for s in self._stops), default=0)
        self._text = ""
        self._cut: int | None = None

    @property
    def count(self) -> str:
        n = len(self.times)
        return "1 token" if n == 1 else f"{n} tokens"

    def _prompt_event(self, t: float) -> PromptEvaluated:
        self._announced = True
        return PromptEvaluated(
            tokens=self.tokens,
            rendered=self.rendered,
            n_new=len(self.tokens) if self.exact else 0,  # tokens sent; the server may reuse some
            n_reused=0,
            prefill_s=max(0.0, t - self.t_request),  # client-side: request -> first token
            t=t,
        )

    def take(self, obj: dict) -> Iterator[Event]:
        """The events of one chunk; sets `stopped` when a stop string appears."""
        if isinstance(obj.get("timings"), dict):
            self.timings = obj["timings"]
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        choices = obj.get("choices") or []
        if not choices:
            return
        choice = choices[0]
        for p in pieces_from_choice(choice, self.request.top_n):
            t = time.perf_counter()
            if not self._announced:
                yield self._prompt_event(t)
            yield Token(len(self.times), p.id, p.piece, p.text, t, p.logprob, p.candidates)
            self.times.append(t)
            self.parts.append(p.text)
            if self._stops and self._find_stop(p.text):
                self.stopped = True
                return
        if choice.get("finish_reason"):
            self.finish_raw = str(choice["finish_reason"])

    def _find_stop(self, delta: str) -> bool:
        start = max(0, len(self._text) - self._max_stop)
        self._text += delta
        window = self._text[start:]
        hits = [(window.find(s), s) for s in self._stops if s in window]
        if not hits:
            return False
        at, stop = min(hits)
        self._cut, self.detail = start + at, stop
        return True

    def finish(self, reason: StopReason | None = None) -> Iterator[Event]:
        """The closing events: PromptEvaluated if no token came, then Finished with stats."""
        now = time.perf_counter()
        if not self._announced:
            yield self._prompt_event(now)
        timings, usage = self.timings, self.usage
        prompt_n = timings.get("prompt_n")
        prompt_n = prompt_n if isinstance(prompt_n, int) else None
        total = usage.get("prompt_tokens")
        if not isinstance(total, int) or total <= 0:
            if prompt_n is not None:
                total = prompt_n + int(timings.get("cache_n") or 0)
            else:
                total = len(self.tokens) if self.exact else 0  # 0: the server did not say
        n_past = total + len(self.times)
        detail = self.detail
        if reason is None:
            reason, detail = finish_reason(self.finish_raw, n_past, self.n_ctx)
        elif reason == StopReason.ERROR and not detail:
            detail = finish_reason(None, 0, 0)[1]
        # Prefill: the server's own time and count where it sends them (llama-server's
        # timings). Otherwise the time is request -> first token, and the count of tokens
        # evaluated is unknown (a server may reuse its cache), so no prefill rate is made up.
        prompt_ms = timings.get("prompt_ms")
        t_first = self.times[0] if self.times else now
        if isinstance(prompt_ms, int | float) and prompt_n is not None:
            t_prefill_end = self.t_request + prompt_ms / 1000.0
        else:
            t_prefill_end = t_first
        stats = stats_from_times(
            t_request=self.t_request,
            t_prefill_start=self.t_request,
            t_prefill_end=t_prefill_end,
            token_times=self.times,
            prompt_tokens=total,
            prompt_evaluated=prompt_n if prompt_n is not None else 0,
            n_past=n_past,
            n_ctx=self.n_ctx,
        )
        text = "".join(self.parts)
        if self._cut is not None:
            text = self._text[: self._cut]
        yield Finished(reason, text, stats, detail)
