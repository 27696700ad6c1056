"""The OpenAI-compatible HTTP engine: llama-server, the llama-cpp-python server, vLLM, Ollama."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import httpx

from chatapp.engine.capabilities import Capabilities
from chatapp.engine.inspection import REMOTE_NOTE, InsideUnavailable, Inspection, InspectRequest
from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Event,
    Failed,
    GenerateRequest,
    ModelInfo,
    Notice,
    SettingsApplied,
    StopReason,
    TokenPiece,
)
from chatapp.engine.remote import errors as errs
from chatapp.engine.remote import flavours, probe
from chatapp.engine.remote.flavours import UNKNOWN, Flavour, grammar_servers
from chatapp.engine.remote.reply_socket import ReplySocket
from chatapp.engine.remote.stream import StreamState, body_for, sse_objects
from chatapp.engine.remote.tokens import ServerTokenizer
from chatapp.engine.steering import REMOTE_NOTE as STEERING_NOTE
from chatapp.engine.steering import Steering, SteeringUnavailable
from chatapp.sampling import SamplerSettings

SAMPLER_NOTICE = "sampler changes apply from the next reply on a server"


class RemoteEngine:
    """A model served over the OpenAI-compatible API. Generation calls come from one thread at
    a time; cancel() and update_settings() may come from any thread. The API key is read from
    the environment variable named by api_key_env and is never logged or shown."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key_env: str | None = None,
        model_name: str | None = None,
        connect_timeout: float = 5,
        read_timeout: float = 60,
    ) -> None:
        url = base_url.strip().rstrip("/")
        if "://" not in url:
            url = "http://" + url
        self.base_url = url.removesuffix("/v1")
        self.api_key_env = api_key_env
        self.model_name = model_name
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self.info: ModelInfo | None = None
        self.flavour: Flavour = UNKNOWN
        """Which server this is (flavours.py), known once started."""
        self.model: str | None = model_name
        self.models: tuple[str, ...] = ()
        self.settings: SamplerSettings | None = None
        """The settings last given to update_settings(); the next reply uses them."""
        self.prompt_tokens_exact = False
        """Whether the last PromptEvaluated tokens are the server's real prompt tokens."""
        self._pending: SamplerSettings | None = None
        self._key: str | None = None
        self._client: httpx.Client | None = None
        self._stream_client: httpx.Client | None = None
        self._socket = ReplySocket()
        self._cancel = self._socket.cancelled
        self._parts: list[str] = []
        self._tokenizer = ServerTokenizer(self._call, UNKNOWN, None)
        self._noticed: set[str] = set()
        self._logprobs_ok = True
        self.notes: list[str] = []

    def __repr__(self) -> str:
        return f"RemoteEngine({self.base_url!r}, kind={self.kind!r}, model={self.model!r})"

    @property
    def last_partial_text(self) -> str:
        """The reply text received so far (kept when a reply fails midway)."""
        return "".join(self._parts)

    @property
    def kind(self) -> str:
        """llama-server, llama-cpp-python, ollama, vllm or openai (anything else)."""
        return self.flavour.kind

    @property
    def can_tokenize(self) -> bool:
        return self.flavour.can_tokenize

    @property
    def capabilities(self) -> Capabilities:
        """A server streams replies with top-10 candidates where it gives log-probabilities;
        what else it can do is its flavour's (known once started). No after-sampler cuts:
        llama-server's post-sampling probabilities do not say which sampler cut a token."""
        return Capabilities(
            candidates=self._logprobs_ok,
            grammar=self.flavour.grammar,
            raw_prompt=True,
            tokenize=self.can_tokenize,
        )

    @property
    def alive(self) -> bool:
        return self.info is not None and self._client is not None

    def kill(self, reason: str = "it did not stop when asked") -> None:
        """A server's reply is stopped by dropping its stream (the server itself stays up)."""
        self.cancel()

    def count_tokens(self, messages: list[ChatMessage]) -> int | None:
        """None: the server's chat template is not known here, so its prompt cannot be counted."""
        return None

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> ModelInfo:
        """Connect, pick the model and find out what the server can do; EngineError if not."""
        self.close()
        self._key = None
        if self.api_key_env:
            self._key = os.environ.get(self.api_key_env) or None
            if self._key is None:
                raise EngineError(
                    f"the environment variable ${self.api_key_env} is not set; "
                    "put the server's API key in it"
                )
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        timeout = httpx.Timeout(
            self.read_timeout, connect=self.connect_timeout, pool=self.connect_timeout
        )
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        # Replies get a fresh connection each, so cancel() can shut its socket from any thread.
        self._stream_client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        t0 = time.perf_counter()
        try:
            entries = probe.model_entries(self._call("GET", "/v1/models"), self.base_url)
            self.models = tuple(str(e["id"]) for e in entries)
            entry = probe.pick_model(entries, self.model_name)
            self.model = str(entry["id"])
            self.flavour, props = flavours.detect(self._probe, entries)
        except EngineError:
            self.close()
            raise
        self.info = probe.model_info(
            self.base_url, self.kind, entry, props, time.perf_counter() - t0
        )
        self._noticed.clear()
        self._logprobs_ok = True
        self._tokenizer = ServerTokenizer(self._call, self.flavour, self.model)
        return self.info

    def _probe(self, method: str, path: str, body: dict | None = None) -> dict | None:
        try:
            return self._call(method, path, body)
        except EngineError:
            return None

    def close(self) -> None:
        """Drop the connections (the server and its model stay up)."""
        self.cancel()
        for client in (self._client, self._stream_client):
            if client is not None:
                client.close()
        self._client = self._stream_client = None
        self.info = None

    def __enter__(self) -> RemoteEngine:
        if self.info is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- small requests -----------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        """One JSON request; raises EngineError with one sentence (never the key)."""
        if self._client is None:
            raise EngineError("the server engine is not started")
        try:
            resp = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise EngineError(self._transport(exc)) from None
        if resp.status_code >= 400:
            raise EngineError(self._status(resp.status_code, resp.content, path))
        try:
            data = resp.json()
        except ValueError:
            raise EngineError(f"the server sent something that is not JSON from {path}") from None
        if not isinstance(data, dict):
            raise EngineError(f"the server sent an unexpected answer from {path}")
        return data

    def _transport(self, exc: Exception, n_tokens: int | None = None) -> str:
        msg = errs.transport_message(
            exc,
            base_url=self.base_url,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            n_tokens=n_tokens,
        )
        return errs.scrub(msg, self._key)

    def _status(self, status: int, body: bytes, path: str) -> str:
        msg = errs.status_message(
            status,
            errs.scrub(body.decode("utf-8", "replace"), self._key),
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            model=self.model,
            models=self.models,
            path=path,
        )
        return errs.scrub(msg, self._key)

    # ---- tokens -------------------------------------------------------------------------

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        """Cut text into the server's tokens (llama-server, llama-cpp-python server only).

        The llama-cpp-python server always parses special tokens and has no pieces endpoint:
        pieces come from /extras/detokenize per token (cached), filled in from the text.
        """
        if self._client is None:
            raise EngineError("the server engine is not started")
        return self._tokenizer.tokenize(text, special, add_special=False)

    # ---- generation ---------------------------------------------------------------------

    def inspect(self, request: InspectRequest) -> Inspection:
        """A server has no view of its model's layers: always InsideUnavailable."""
        raise InsideUnavailable(REMOTE_NOTE)

    def set_steering(self, steering: Steering) -> None:
        """A server has no control vectors: always SteeringUnavailable."""
        raise SteeringUnavailable(STEERING_NOTE)

    def update_settings(self, settings: SamplerSettings) -> None:
        """Store settings for the next reply (a server cannot change a reply in progress)."""
        self.settings = self._pending = settings

    def cancel(self) -> None:
        """Stop the reply in progress: its socket is shut at once, from any thread."""
        self._socket.cancel()

    def _notice(self, key: str, message: str) -> Iterator[Notice]:
        if key not in self._noticed:
            self._noticed.add(key)
            yield Notice(message)

    def generate(self, request: GenerateRequest) -> Iterator[Event]:
        """Stream one reply over SSE. Ends with Finished, or Failed after the tokens seen."""
        self._cancel.clear()
        self._parts = []
        if self._stream_client is None or self.info is None:
            yield Failed("the server engine is not started")
            return
        if request.steering is not None and request.steering.active:
            yield Failed(STEERING_NOTE)
            return
        settings, self._pending = (self._pending or request.settings), None
        if settings != request.settings:
            yield SettingsApplied(settings, 0)
        yield from self._notice("sampler", SAMPLER_NOTICE)
        if request.grammar is not None and not self.flavour.grammar:
            yield Failed(f"a grammar needs {grammar_servers()}, not {self.kind}")
            return
        if request.reply_prefix_ids:
            yield from self._notice(
                "prefix", "a server cannot continue a reply from its tokens; it starts afresh"
            )
        try:
            rendered, tokens, exact = self._tokenizer.prompt(request)
        except EngineError as exc:
            yield Failed(str(exc))
            return
        self.prompt_tokens_exact = exact
        if not exact:
            why = (
                "this server cannot tokenize, so the prompt's tokens are not shown"
                if not self.can_tokenize
                else "the prompt's tokens are approximate: the message text without the "
                "server's chat template"
            )
            yield from self._notice("prompt", why)
        chat = request.raw_prompt is None
        logprobs = request.top_n > 0 and self._logprobs_ok
        body = body_for(request, settings, self.model, self.flavour, logprobs)
        state = StreamState(request, settings, rendered, tokens, exact, self.info.n_ctx)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        try:
            yield from self._stream(path, body, state)
        except errs.HTTPFailure as exc:
            detail = errs.server_message(exc.body).lower()
            if logprobs and ("logprob" in detail or "logits_all" in detail):
                self._logprobs_ok = False
                yield Notice("this server gives no token probabilities; candidates stay empty")
                body = body_for(request, settings, self.model, self.flavour, False)
                try:
                    yield from self._stream(path, body, state)
                except errs.HTTPFailure as again:
                    yield Failed(self._status(again.status, again.body, path))
            else:
                yield Failed(self._status(exc.status, exc.body, path))
        finally:
            self._socket.forget()

    def _stream(self, path: str, body: dict, state: StreamState) -> Iterator[Event]:
        assert self._stream_client is not None
        client = self._stream_client
        req = client.build_request(
            "POST",
            path,
            json=body,
            headers={"Accept": "text/event-stream"},
            extensions={"trace": self._socket.trace},
        )
        state.t_request = time.perf_counter()
        try:
            resp = client.send(req, stream=True)
        except httpx.HTTPError as exc:
            if self._cancel.is_set():
                yield from state.finish(StopReason.CANCELLED)
            else:
                yield Failed(self._transport(exc))
            return
        try:
            if resp.status_code >= 400:
                raise errs.HTTPFailure(resp.status_code, resp.read()[:65536])
            yield from self._events(resp, state)
        except httpx.HTTPError as exc:
            if self._cancel.is_set():
                yield from state.finish(StopReason.CANCELLED)
            else:
                yield Failed(self._transport(exc, n_tokens=len(state.times)))
        finally:
            resp.close()

    def _events(self, resp: httpx.Response, state: StreamState) -> Iterator[Event]:
        self._parts = state.parts
        n_events = 0
        for obj in sse_objects(resp):
            n_events += 1
            if self._cancel.is_set():
                yield from state.finish(StopReason.CANCELLED)
                return
            if obj is None:  # [DONE]
                yield from state.finish()
                return
            if isinstance(obj, str):  # an error sentence from the stream reader
                yield Failed(errs.scrub(obj.replace("{n}", state.count), self._key))
                return
            if "error" in obj:
                message = errs.stream_error_message(obj, len(state.times))
                yield Failed(errs.scrub(message, self._key))
                return
            yield from state.take(obj)
            if state.stopped:
                yield from state.finish(StopReason.STOP_STRING)
                return
        if self._cancel.is_set():
            yield from state.finish(StopReason.CANCELLED)
        elif state.finish_raw is not None:
            yield from state.finish()  # a finish reason but no [DONE]: fine
        elif n_events == 0:
            yield Failed(self._why_empty(resp.request))
        else:
            yield Failed(f"the server closed the stream after {state.count}")

    def _why_empty(self, req: httpx.Request) -> str:
        """A stream that ended before any event: ask again without streaming, for one token,
        to get the error as a status (the llama-cpp-python server reports a too-long prompt
        or logprobs it cannot give only that way). Raises errs.HTTPFailure for generate()."""
        body = json.loads(req.content)
        body.update(stream=False, max_tokens=1)
        body.pop("stream_options", None)
        path = req.url.path
        try:
            assert self._client is not None
            resp = self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            return self._transport(exc)
        if resp.status_code >= 400:
            raise errs.HTTPFailure(resp.status_code, resp.content[:65536])
        return "the server closed the stream before sending anything"
