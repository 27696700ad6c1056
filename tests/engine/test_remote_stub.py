"""The remote engine against small stub servers on 127.0.0.1: errors, llama-server's extras."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time

import pytest
from fakes.servers import Route, StubServer

from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    Notice,
    PromptEvaluated,
    StopReason,
    Token,
)
from chatapp.engine.remote.client import RemoteEngine
from chatapp.sampling import SamplerSettings

KEY = "sk-test-7f3a9c1e5b"
DONE_STOP = 'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'


pytestmark = pytest.mark.usefixtures("fresh_dirs")


@pytest.fixture
def stub():
    srv = StubServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()


def chunk(text: str, logprobs: dict | None = None, **extra) -> str:
    choice = {"delta": {"content": text}, "logprobs": logprobs, "finish_reason": None}
    return "data: " + json.dumps({"choices": [choice], **extra}) + "\n\n"


def ask(**kw) -> GenerateRequest:
    settings = SamplerSettings(temperature=0.0, max_tokens=8)
    return GenerateRequest(messages=(ChatMessage("user", "hi"),), settings=settings, **kw)


@contextlib.contextmanager
def started(url: str, **kw):
    eng = RemoteEngine(url, **kw)
    eng.start()
    try:
        yield eng
    finally:
        eng.close()


def chat_route(stub: StubServer, route: Route) -> None:
    stub.routes[("POST", "/v1/chat/completions")] = route


# ---- API key ------------------------------------------------------------------------------


def test_refused_key_is_clear_and_never_shown(stub, monkeypatch):
    monkeypatch.setenv("CHATAPP_TEST_KEY", KEY)
    # A careless server that echoes the Authorization header back in its error.
    stub.routes[("GET", "/v1/models")] = lambda h, b: h.send_json(
        401, {"error": {"message": f"bad key {h.headers.get('Authorization')}"}}
    )
    eng = RemoteEngine(stub.url, api_key_env="CHATAPP_TEST_KEY")
    with pytest.raises(EngineError) as info:
        eng.start()
    assert str(info.value) == (
        "the server refused the API key (401); set the key in $CHATAPP_TEST_KEY"
    )
    assert stub.seen[0][2] == f"Bearer {KEY}"
    assert KEY not in str(info.value) and KEY not in repr(eng) and KEY not in repr(info.value)


def test_refused_key_during_a_reply(stub, monkeypatch):
    monkeypatch.setenv("CHATAPP_TEST_KEY", KEY)
    chat_route(stub, lambda h, b: h.send_json(403, {"error": {"message": f"no {KEY}"}}))
    with started(stub.url, api_key_env="CHATAPP_TEST_KEY") as eng:
        events = list(eng.generate(ask()))
    assert events[-1] == Failed(
        "the server refused the API key (403); set the key in $CHATAPP_TEST_KEY"
    )
    assert all(KEY not in repr(e) for e in events)


def test_key_wanted_but_none_given(stub):
    stub.routes[("GET", "/v1/models")] = lambda h, b: h.send_json(401, {"detail": "no"})
    with pytest.raises(EngineError, match=r"wants an API key \(401\).*--api-key-env"):
        RemoteEngine(stub.url).start()


# ---- errors in and around the stream ------------------------------------------------------


def test_malformed_sse(stub):
    chat_route(stub, lambda h, b: h.send_sse([chunk("Hi"), "data: {not json\n\n"]))
    with started(stub.url) as eng:
        events = list(eng.generate(ask()))
        assert eng.last_partial_text == "Hi"
    assert [e.text for e in events if isinstance(e, Token)] == ["Hi"]
    assert events[-1] == Failed("the server sent a malformed stream event after 1 token")


@pytest.mark.parametrize(
    "error",
    [
        'data: {"error": {"message": "the model crashed. Please try again."}}\n\n',
        'event: error\ndata: {"message": "the model crashed"}\n\n',
    ],
)
def test_error_event_after_200(stub, error):
    chat_route(stub, lambda h, b: h.send_sse([chunk("Hel"), chunk("lo"), error]))
    with started(stub.url) as eng:
        events = list(eng.generate(ask()))
        assert eng.last_partial_text == "Hello"
    assert sum(isinstance(e, Token) for e in events) == 2
    assert events[-1] == Failed("the server reported an error after 2 tokens: the model crashed")


@pytest.mark.parametrize(
    ("error", "where"),
    [
        (  # llama-server, older
            {"code": 400, "message": "the request exceeds the available context size, "
             "try increasing it", "type": "exceed_context_size_error"},
            "the server's context",
        ),
        (  # llama-server, newer
            {"code": 400, "message": "request (5000 tokens) exceeds the available context size "
             "(4096 tokens), try increasing it", "type": "exceed_context_size_error"},
            "the server's context of 4096 tokens",
        ),
        (  # vLLM / OpenAI
            {"message": "This model's maximum context length is 4096 tokens. However, you "
             "requested 5000 tokens.", "type": "BadRequestError"},
            "the server's context of 4096 tokens",
        ),
    ],
)  # fmt: skip
def test_context_too_long(stub, error, where):
    chat_route(stub, lambda h, b: h.send_json(400, {"error": error}))
    with started(stub.url) as eng:
        events = list(eng.generate(ask()))
    assert events[-1] == Failed(
        f"the conversation is too long for {where}; clear the chat, shorten the prompt "
        "or lower max tokens"
    )


def test_empty_stream(stub):
    def route(h, body):
        if body["stream"]:
            h.send_sse([": nothing to say\n\n"])
        else:
            h.send_json(
                200, {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}
            )

    chat_route(stub, route)
    with started(stub.url) as eng:
        events = list(eng.generate(ask()))
    assert events[-1] == Failed("the server closed the stream before sending anything")


def test_server_error_5xx(stub):
    chat_route(stub, lambda h, b: h.send_json(500, {"error": {"message": "CUDA out of memory"}}))
    with started(stub.url) as eng:
        events = list(eng.generate(ask()))
    assert events[-1] == Failed("the server failed with 500: CUDA out of memory")


def test_plain_openai_server_cannot_tokenize(stub):
    with started(stub.url) as eng:
        assert eng.kind == "openai" and not eng.can_tokenize
        with pytest.raises(EngineError, match="^this server cannot tokenize$"):
            eng.tokenize("hi")
        chat_route(stub, lambda h, b: h.send_sse([chunk("ok"), DONE_STOP, "data: [DONE]\n\n"]))
        events = list(eng.generate(ask()))
    prompt = next(e for e in events if isinstance(e, PromptEvaluated))
    assert prompt.tokens == () and not eng.prompt_tokens_exact
    assert Notice("this server cannot tokenize, so the prompt's tokens are not shown") in events
    assert events[-1].text == "ok" and events[-1].reason == StopReason.EOG


def test_unknown_model_name(stub):
    with pytest.raises(EngineError) as info:
        RemoteEngine(stub.url, model_name="nope").start()
    assert str(info.value) == "the server has no model named 'nope'; it has: stub-model"


def test_read_timeout_never_hangs(stub):
    chat_route(stub, lambda h, b: stub.release.wait(10))
    with started(stub.url, read_timeout=0.5) as eng:
        t0 = time.perf_counter()
        events = list(eng.generate(ask()))
        elapsed = time.perf_counter() - t0
    assert events[-1] == Failed(f"the server at {stub.url} did not answer within 0.5 s")
    assert elapsed < 3


def test_start_times_out_on_a_silent_server(stub):
    stub.routes[("GET", "/v1/models")] = lambda h, b: stub.release.wait(10)
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match="did not answer within 0.5 s"):
        RemoteEngine(stub.url, read_timeout=0.5).start()
    assert time.perf_counter() - t0 < 3


def test_cancel_while_the_server_is_silent(stub):
    chat_route(stub, lambda h, b: stub.release.wait(10))
    with started(stub.url, read_timeout=30) as eng:
        timer = threading.Timer(0.3, eng.cancel)
        t0 = time.perf_counter()
        timer.start()
        events = list(eng.generate(ask()))
        elapsed = time.perf_counter() - t0
    assert isinstance(events[-1], Finished) and events[-1].reason == StopReason.CANCELLED
    assert elapsed < 2


def test_logprobs_refused_falls_back(stub):
    def route(h, body):
        if body.get("logprobs"):
            h.send_json(400, {"error": {"message": "logprobs are not supported"}})
        else:
            h.send_sse([chunk("ok"), DONE_STOP, "data: [DONE]\n\n"])

    chat_route(stub, route)
    with started(stub.url) as eng:
        events = list(eng.generate(ask(top_n=5)))
    assert any(isinstance(e, Notice) and "no token probabilities" in e.message for e in events)
    assert isinstance(events[-1], Finished) and events[-1].text == "ok"
    assert events[-1].reason == StopReason.EOG


# ---- a llama-server look-alike: /props, /tokenize with pieces, ids, timings ---------------


def test_llama_server_extras(stub):
    vocab = {"<|user|>": 1, "hi": 2, "<|assistant|>": 3, "He": 10, "llo": 11, "Hel": 12}
    stub.routes[("GET", "/props")] = lambda h, b: h.send_json(
        200, {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    )
    stub.routes[("POST", "/apply-template")] = lambda h, b: h.send_json(
        200, {"prompt": "<|user|>hi<|assistant|>"}
    )
    stub.routes[("POST", "/tokenize")] = lambda h, b: h.send_json(
        200, {"tokens": [{"id": 1, "piece": "<|user|>"}, {"id": 2, "piece": "hi"},
                         {"id": 3, "piece": [60, 124, 97, 115, 115, 105, 115, 116, 97, 110,
                                             116, 124, 62]}]}
    )  # fmt: skip

    def entry(tok: str, lp: float, top: list[tuple[str, float]]) -> dict:
        return {"id": vocab[tok], "token": tok, "bytes": list(tok.encode()), "logprob": lp,
                "top_logprobs": [{"id": vocab[t], "token": t, "bytes": list(t.encode()),
                                  "logprob": p} for t, p in top]}  # fmt: skip

    def chat(h, body):
        assert body["logprobs"] is True and body["top_logprobs"] == 2
        assert body["top_k"] == 40 and body["repeat_last_n"] == 64 and "stop" not in body
        h.send_sse([
            chunk("He", {"content": [entry("He", -0.1, [("He", -0.1), ("Hel", -2.5)])]}),
            chunk("llo", {"content": [entry("llo", -0.2, [("llo", -0.2), ("He", -3.0)])]}),
            'data: {"choices": [{"delta": {}, "finish_reason": "stop"}], '
            '"timings": {"cache_n": 2, "prompt_n": 1, "prompt_ms": 12.5, "predicted_n": 2}, '
            '"usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n',
            "data: [DONE]\n\n",
        ])  # fmt: skip

    chat_route(stub, chat)
    with started(stub.url) as eng:
        assert eng.kind == "llama-server" and eng.info.n_ctx == 4096
        events = list(eng.generate(ask(top_n=2)))
        assert eng.prompt_tokens_exact
        assert [p.piece for p in eng.tokenize("x")][2] == b"<|assistant|>"
    prompt = next(e for e in events if isinstance(e, PromptEvaluated))
    assert prompt.rendered == "<|user|>hi<|assistant|>"
    assert [t.id for t in prompt.tokens] == [1, 2, 3]
    tokens = [e for e in events if isinstance(e, Token)]
    assert [(t.id, t.text) for t in tokens] == [(10, "He"), (11, "llo")]
    assert [c.id for c in tokens[0].candidates] == [10, 12]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == StopReason.EOG
    assert finished.text == "Hello"
    st = finished.stats
    assert st.prompt_tokens == 3 and st.prompt_evaluated == 1 and st.n_ctx == 4096
    assert st.prefill_s == pytest.approx(0.0125)
    assert not any(isinstance(e, Notice) and "approximate" in e.message for e in events)


def test_llama_server_post_sampling_probabilities_are_the_after_column(stub):
    """llama-server asked for post_sampling_probs: its top_probs (the tokens its samplers kept,
    with their probabilities after them) are the candidates' after column as it sent them;
    the probability before the samplers is not reported (nan; ask --json writes null)."""
    stub.routes[("GET", "/props")] = lambda h, b: h.send_json(
        200, {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    )
    kept = [(10, " red", 0.625), (12, " blue", 0.25), (13, " green", 0.125)]

    def chat(h, body):
        assert body["post_sampling_probs"] is True and body["top_logprobs"] == 5
        top = [{"id": i, "token": t, "bytes": list(t.encode()), "prob": p} for i, t, p in kept]
        entry = {"id": 12, "token": " blue", "bytes": list(b" blue"), "prob": 0.25}
        h.send_sse([chunk(" blue", {"content": [{**entry, "top_probs": top}]}), DONE_STOP])

    chat_route(stub, chat)
    with started(stub.url) as eng:
        events = list(eng.generate(ask(top_n=5)))
    (token,) = [e for e in events if isinstance(e, Token)]
    assert token.id == 12 and token.logprob is None
    rows = token.candidates
    assert [(c.id, c.text, c.p_final, c.kept) for c in rows] == [(*k, True) for k in kept]
    assert all(math.isnan(c.p) for c in rows)


def test_other_servers_are_not_asked_for_post_sampling_probabilities(stub):
    seen = []

    def chat(h, body):
        seen.append(body)
        h.send_sse([chunk("ok"), DONE_STOP])

    chat_route(stub, chat)
    with started(stub.url) as eng:
        list(eng.generate(ask(top_n=5)))
    assert seen and "post_sampling_probs" not in seen[0] and seen[0]["logprobs"] is True


async def test_the_panel_draws_a_servers_after_column_as_sent():
    """The Next token panel over llama-server's post-sampling rows: its probabilities in the
    after column, the raw column left empty (not reported), never 'nan'."""
    from fakes.engines import ScriptedEngine
    from helpers import SIZE

    from chatapp.engine.remote.tokens import candidates_after
    from chatapp.ui.app import ChatApp

    top = [{"id": 10, "token": " red", "prob": 0.625}, {"id": 12, "token": " blue", "prob": 0.375}]
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.chat_screen.view.probs.candidates = candidates_after(top, 5)
        lines = str(app.chat_screen.view.probs.render()).splitlines()
    red = next(line for line in lines if "' red'" in line)
    assert red.rstrip().endswith("0.625") and " - " in red and "nan" not in red
    assert next(line for line in lines if "' blue'" in line).rstrip().endswith("0.375")
