"""The remote engine against a real llama-cpp-python server and small local stub servers."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import pane

from chatapp import machine
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    Notice,
    PromptEvaluated,
    SettingsApplied,
    StopReason,
    Token,
)
from chatapp.engine.remote.client import SAMPLER_NOTICE, RemoteEngine
from chatapp.sampling import SamplerSettings

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplerSettings(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)


pytestmark = pytest.mark.usefixtures("crash_probe", "fresh_dirs")

NO_EXTRA_BUFFERS = Path(__file__).parents[1] / "llama_cpp_server_no_extra_buffers.py"
EXTRA_BUFFERS_CRASH = False  # set by crash_probe: whether they crashed on this CPU


@pytest.fixture(scope="module")
def crash_probe(model_path) -> None:
    """Starts the real engine once on this machine: whether it had to turn llama.cpp's extra
    CPU buffers off (their crash is remembered in the session's cache dir)."""
    global EXTRA_BUFFERS_CRASH
    with LocalEngine(LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=0)):
        EXTRA_BUFFERS_CRASH = bool(machine.repack_crashes())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_cpp_server(log_dir: Path, *extra: str):
    """A real `python -m llama_cpp.server` on the bundled model; always stopped afterwards.
    On a CPU where llama.cpp's extra buffers crash (found by the engine: EXTRA_BUFFERS_CRASH)
    it runs with them off, as the engine does there."""
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server]")
    from chatapp.models.bundled import BundledModelMissing, smollm2_path

    try:
        model = smollm2_path()
    except BundledModelMissing as exc:
        pytest.skip(str(exc))
    port = _free_port()
    cmd = [
        sys.executable,
        *([str(NO_EXTRA_BUFFERS)] if EXTRA_BUFFERS_CRASH else ["-m", "llama_cpp.server"]),
        "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", *extra,
    ]  # fmt: skip
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"server-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}; see {log.name}")
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the server did not come up within 120 s")
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with llama_cpp_server(tmp_path_factory.mktemp("server")) as (url, _proc):
        yield url


@pytest.fixture
def engine(server):
    eng = RemoteEngine(server)
    eng.start()
    yield eng
    eng.close()


def ask(text: str, settings: SamplerSettings = GREEDY, **kw) -> GenerateRequest:
    return GenerateRequest(messages=(ChatMessage("user", text),), settings=settings, **kw)


# ---- the real llama-cpp-python server ---------------------------------------------------


@pytest.mark.slow
def test_start_reports_the_server(engine, server):
    assert engine.kind == "llama-cpp-python"
    assert engine.info is not None
    assert engine.info.path.startswith(server + " :: ")
    assert engine.info.path.endswith(".gguf")
    assert engine.info.has_chat_template and not engine.info.gpu_offload_supported
    assert engine.can_tokenize


@pytest.mark.slow
def test_streams_tokens_with_candidates(engine):
    events = list(engine.generate(ask("Name three colours.", settings=GREEDY.with_(max_tokens=12))))
    kinds = [type(e) for e in events]
    assert kinds.index(PromptEvaluated) < kinds.index(Token)
    assert isinstance(events[-1], Finished)
    assert Notice(SAMPLER_NOTICE) in events
    tokens = [e for e in events if isinstance(e, Token)]
    assert len(tokens) == 12 and [t.index for t in tokens] == list(range(12))
    finished = events[-1]
    assert finished.reason == StopReason.MAX_TOKENS
    assert finished.text == "".join(t.text for t in tokens) and finished.text.strip()
    for tok in tokens:
        assert tok.piece == tok.text.encode("utf-8")
        assert tok.logprob is not None and tok.logprob <= 0
        assert 1 <= len(tok.candidates) <= 10
        ps = [c.p for c in tok.candidates]
        assert all(0 < p <= 1 for p in ps) and sum(ps) <= 1.0001
        assert ps == sorted(ps, reverse=True)
        assert all(c.p_final == c.p for c in tok.candidates)
    # Greedy: the sampled token is the top candidate.
    assert tokens[0].candidates[0].piece == tokens[0].piece
    assert math.isclose(tokens[0].candidates[0].p, math.exp(tokens[0].logprob), rel_tol=1e-6)
    st = finished.stats
    assert st.completion_tokens == 12 and st.ttft_s and st.ttft_s > 0
    assert st.decode_tps and st.decode_tps > 0
    prompt = next(e for e in events if isinstance(e, PromptEvaluated))
    assert prompt.tokens and b"".join(t.piece for t in prompt.tokens) == b"Name three colours."
    assert not engine.prompt_tokens_exact  # no template on this server: said in a Notice
    assert any(isinstance(e, Notice) and "approximate" in e.message for e in events)


@pytest.mark.slow
def test_notice_once_and_settings_for_next_reply(engine):
    first = list(engine.generate(ask("Hi", settings=GREEDY.with_(max_tokens=2))))
    assert Notice(SAMPLER_NOTICE) in first
    new = GREEDY.with_(max_tokens=3)
    engine.update_settings(new)
    second = list(engine.generate(ask("Hi", settings=GREEDY.with_(max_tokens=2))))
    assert Notice(SAMPLER_NOTICE) not in second
    assert second[0] == SettingsApplied(new, 0)
    assert sum(isinstance(e, Token) for e in second) == 3


@pytest.mark.slow
def test_stop_string_found_client_side(engine):
    prompt, settings = "Count: one, two, three", GREEDY.with_(max_tokens=24)
    text = list(engine.generate(ask(prompt, settings=settings)))[-1].text
    words = [w for w in text.split() if len(w) > 3]
    assert words, text
    stop = words[len(words) // 2]
    events = list(engine.generate(ask(prompt, settings=settings, stop=(stop,))))
    finished = events[-1]
    assert finished.reason == StopReason.STOP_STRING and finished.detail == stop
    assert finished.text == text[: text.index(stop)]


@pytest.mark.slow
def test_tokenize(engine):
    text = "Hello <|im_start|> world, ünïcødé 🦙"
    pieces = engine.tokenize(text)
    ids = httpx.post(engine.base_url + "/extras/tokenize", json={"input": text}).json()["tokens"]
    assert [p.id for p in pieces] == ids
    assert b"".join(p.piece for p in pieces) == text.encode("utf-8")
    assert any(p.piece == b"<|im_start|>" for p in pieces)


@pytest.mark.slow
def test_cancel_stops_promptly(engine):
    got: list = []
    timer: threading.Timer | None = None
    seen_at_cancel: list[int] = []

    def cancel() -> None:
        seen_at_cancel.append(sum(isinstance(e, Token) for e in got))
        engine.cancel()

    long_reply = ask("Write a long story.", settings=GREEDY.with_(max_tokens=400))
    for event in engine.generate(long_reply):
        got.append(event)
        if isinstance(event, Token) and event.index == 2 and timer is None:
            timer = threading.Timer(0.0, cancel)
            timer.start()
    finished = got[-1]
    assert isinstance(finished, Finished) and finished.reason == StopReason.CANCELLED
    # Promptly in tokens, not seconds (a busy machine slows both sides alike): the socket is
    # shut at once, so at most the token being read when cancel() ran still arrives.
    late = sum(isinstance(e, Token) for e in got) - seen_at_cancel[0]
    assert late <= 1, f"{late} tokens arrived after cancel()"
    n = sum(isinstance(e, Token) for e in got)
    assert 3 <= n < 400
    assert finished.text == "".join(e.text for e in got if isinstance(e, Token))
    # The server takes the next request normally.
    again = list(engine.generate(ask("Hi", settings=GREEDY.with_(max_tokens=2))))
    assert isinstance(again[-1], Finished) and again[-1].reason == StopReason.MAX_TOKENS


@pytest.mark.slow
def test_server_killed_mid_reply(tmp_path):
    with llama_cpp_server(tmp_path) as (url, proc):
        eng = RemoteEngine(url)
        eng.start()
        events = []
        long_reply = ask("Write a long story.", settings=GREEDY.with_(max_tokens=400))
        for event in eng.generate(long_reply):
            events.append(event)
            if isinstance(event, Token) and event.index == 3:
                proc.kill()
        eng.close()
    tokens = [e for e in events if isinstance(e, Token)]
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.message == f"the server closed the stream after {len(tokens)} tokens"
    assert 4 <= len(tokens) < 400
    assert eng.last_partial_text == "".join(t.text for t in tokens)


@pytest.mark.slow
def test_server_without_logprobs_falls_back(tmp_path):
    # This server reports "logprobs is not supported" only by ending the stream empty.
    with llama_cpp_server(tmp_path, "--logits_all", "False") as (url, _proc):
        with contextlib.closing(RemoteEngine(url)) as eng:
            eng.start()
            events = list(eng.generate(ask("Hi", settings=GREEDY.with_(max_tokens=4))))
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert "this server gives no token probabilities; candidates stay empty" in notices
    tokens = [e for e in events if isinstance(e, Token)]
    assert len(tokens) == 4 and all(not t.candidates and t.logprob is None for t in tokens)
    assert isinstance(events[-1], Finished) and events[-1].reason == StopReason.MAX_TOKENS


@pytest.mark.slow
def test_context_too_long_on_the_real_server(engine):
    events = list(engine.generate(ask("hello " * 2100, settings=GREEDY.with_(max_tokens=4))))
    assert isinstance(events[-1], Failed)
    assert events[-1].message == (
        "the conversation is too long for the server's context of 2048 tokens; "
        "clear the chat, shorten the prompt or lower max tokens"
    )


@pytest.mark.slow
def test_cli_ask_against_the_server(server, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "chatapp.cli", "ask", "hi", "--server", server,
           "--max-tokens", "8"]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert "TTFT" in out.stderr and "8 tokens" in out.stderr and "stop: max_tokens" in out.stderr


# ---- connection errors --------------------------------------------------------------------


def test_refused_port_is_clear_and_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(EngineError) as info:
        RemoteEngine(f"http://127.0.0.1:{port}").start()
    assert time.perf_counter() - t0 < 2
    assert str(info.value) == (
        f"cannot connect to http://127.0.0.1:{port}: connection refused; is the server running?"
    )


def test_unknown_host_is_clear():
    # .invalid never resolves (RFC 6761); offline, the resolver fails as quickly.
    with pytest.raises(EngineError) as info:
        RemoteEngine("http://chatapp-test.invalid:8080").start()
    assert str(info.value) == (
        "cannot connect to http://chatapp-test.invalid:8080: the host name "
        "'chatapp-test.invalid' was not found (DNS)"
    )


def test_missing_key_variable(monkeypatch):
    monkeypatch.delenv("CHATAPP_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(EngineError, match=r"\$CHATAPP_TEST_NO_SUCH_KEY is not set"):
        RemoteEngine("http://127.0.0.1:9", api_key_env="CHATAPP_TEST_NO_SUCH_KEY").start()


@pytest.mark.slow
async def test_tui_chats_over_the_server(server):
    """The same chat and panels over a real server: reply, candidates, a note on live settings."""
    from helpers import SIZE, send, wait_until

    from chatapp.ui.app import ChatApp

    app = ChatApp(lambda: RemoteEngine(server, read_timeout=60))
    pane(app).session.settings = GREEDY.with_(max_tokens=12)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Say hello.")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        reply = pane(app).last_reply
        assert reply.finished is not None and reply.finished.text.strip()
        assert pane(app).session.conversation[-1].content == reply.finished.text
        assert app.chat_screen.view.probs.candidates, "top_logprobs fill the probability panel"
        assert app.chat_screen.view.stats_panel.stats.tokens == len(reply.tokens) > 0
