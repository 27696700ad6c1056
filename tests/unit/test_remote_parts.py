"""The remote engine's pure parts: SSE reading, error sentences, chunk and tokenizer parsing."""

from __future__ import annotations

import math

import httpx
import pytest

from chatapp.engine.protocol import StopReason
from chatapp.engine.remote.client import RemoteEngine
from chatapp.engine.remote.errors import (
    context_message,
    one_line,
    server_message,
    status_message,
    transport_message,
)
from chatapp.engine.remote.sse import SSEvent, iter_sse
from chatapp.engine.remote.stream import finish_reason
from chatapp.engine.remote.tokens import align_pieces, candidates_from, pieces_from_choice

BASE = "http://10.0.0.7:8080"


def test_sse_reader():
    lines = [
        ": ping", "data: {\"a\":", "data: 1}", "", "event: error", "data:x", "", "",
        "retry: 5", "data: [DONE]\r",
    ]  # fmt: skip
    assert list(iter_sse(lines)) == [
        SSEvent("message", '{"a":\n1}'),
        SSEvent("error", "x"),
        SSEvent("message", "[DONE]"),
    ]


@pytest.mark.parametrize(
    ("exc", "n", "expected"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), None,
         f"cannot connect to {BASE}: connection refused; is the server running?"),
        (httpx.ConnectError("[Errno -2] Name or service not known"), None,
         f"cannot connect to {BASE}: the host name '10.0.0.7' was not found (DNS)"),
        (httpx.ConnectTimeout("timed out"), None,
         f"cannot connect to {BASE}: no answer within 5 s; check the address, the port and "
         "any firewall"),
        (httpx.ReadTimeout("timed out"), None, f"the server at {BASE} did not answer within 60 s"),
        (httpx.ReadTimeout("timed out"), 7, "the server sent nothing for 60 s after 7 tokens"),
        (httpx.RemoteProtocolError("incomplete chunked read"), 1,
         "the server closed the stream after 1 token"),
        (httpx.RemoteProtocolError("Server disconnected"), None,
         f"the server at {BASE} closed the connection without answering"),
    ],
)  # fmt: skip
def test_transport_sentences(exc, n, expected):
    got = transport_message(exc, base_url=BASE, connect_timeout=5, read_timeout=60, n_tokens=n)
    assert got == expected


def test_status_sentences():
    kw = {"base_url": BASE, "api_key_env": "KEY", "model": "m", "models": ("m", "n")}
    assert status_message(401, "", **kw) == (
        "the server refused the API key (401); set the key in $KEY"
    )
    not_found = '{"object": "error", "message": "The model `m` does not exist.", "code": 404}'
    assert status_message(404, not_found, **kw) == "the server has no model named 'm'; it has: m, n"
    assert status_message(404, "", **kw, path="/v1/models") == (
        f"{BASE} has no /v1/models (404); is it an OpenAI-compatible server?"
    )
    assert status_message(503, "<html>Bad gateway</html>", **kw) == (
        "the server failed with 503: <html>Bad gateway</html>"
    )
    validation = {"detail": [{"loc": ["body", "x"], "msg": "Input should be a valid integer"}]}
    assert status_message(422, validation, **kw) == (
        "the server rejected the request (422): Input should be a valid integer"
    )


def test_context_and_server_messages():
    msg = server_message(
        b'{"error": {"message": "This model\'s maximum context length is 2048 tokens. '
        b'However, you requested 2136 tokens."}}'
    )
    assert msg == "This model's maximum context length is 2048 tokens"
    assert "context of 2048 tokens" in context_message(msg)
    assert context_message("Requested tokens (3000) exceed context window of 2048")
    assert context_message("model not loaded") is None
    assert one_line("a  b\nc. D e." + "x" * 300) == "a b c"
    assert len(one_line("y" * 300)) == 160


def test_candidates_from_top_logprobs():
    top = [
        {"token": "b", "logprob": -2.0},
        {"token": "a", "logprob": -0.5, "bytes": [97]},
        {"token": "a", "logprob": -0.5},  # the sampled token again (llama-cpp-python)
        {"token": "z", "logprob": float("-inf")},
        {"token": "c", "logprob": -3.0, "id": 9},
    ]
    cands = candidates_from(top, 2)
    assert [c.text for c in cands] == ["a", "b"]
    assert cands[0].p == pytest.approx(math.exp(-0.5)) and cands[0].p_final == cands[0].p
    assert [c.id for c in candidates_from(top, 10)] == [-1, -1, 9]
    assert [c.text for c in candidates_from({"x": -1.0, "y": -0.1}, 5)] == ["y", "x"]
    assert candidates_from(top, 0) == ()


def test_pieces_from_choice():
    two = {
        "delta": {"content": "Hello"},
        "logprobs": {"content": [
            {"token": "Hel", "logprob": -0.1, "bytes": [72, 101, 108], "top_logprobs": []},
            {"token": "lo", "logprob": -0.2, "id": 5},
        ]},
    }  # fmt: skip
    pieces = pieces_from_choice(two, 5)
    assert [(p.text, p.piece, p.id, p.logprob) for p in pieces] == [
        ("Hel", b"Hel", -1, -0.1),
        ("lo", b"lo", 5, -0.2),
    ]
    # Entries that do not spell the delta: the text goes on the last token.
    odd = {"delta": {"content": "é"}, "logprobs": {"content": [
        {"token": "\ufffd", "bytes": [195], "logprob": -1.0},
        {"token": "\ufffd", "bytes": [169], "logprob": -1.0},
    ]}}  # fmt: skip
    assert [(p.text, p.piece) for p in pieces_from_choice(odd, 5)] == [
        ("", b"\xc3"),
        ("é", b"\xa9"),
    ]
    assert pieces_from_choice({"delta": {"content": "x"}}, 5)[0].piece == b"x"
    assert pieces_from_choice({"delta": {}, "finish_reason": "stop"}, 5) == []
    legacy = {
        "text": " hi",
        "logprobs": {
            "tokens": [" hi"],
            "token_logprobs": [-0.3],
            "top_logprobs": [{" hi": -0.3, " yo": -1.5}],
        },
    }
    (piece,) = pieces_from_choice(legacy, 5)
    assert piece.text == " hi" and [c.text for c in piece.candidates] == [" hi", " yo"]


def test_align_pieces():
    text = "<s>Hi <|im_start|>user 🦙"
    # BOS (empty), a special token, and an emoji split into bytes that fail to detokenize.
    pieces = [b"", b"<s>", b"Hi", b" ", b"", b"user", None, None, None]
    got = align_pieces(text, pieces)
    assert got[:6] == [b"", b"<s>", b"Hi", b" ", b"<|im_start|>", b"user"]
    assert b"".join(got) == text.encode()
    assert got[6:] == [b" \xf0\x9f", b"\xa6", b"\x99"]  # a guess that fits byte-level BPE
    # Pieces that do not line up with the text are returned as they are.
    assert align_pieces("abc", [b"x", b""]) == [b"x", b""]


def test_finish_reasons():
    assert finish_reason("stop", 10, 100) == (StopReason.EOG, "")
    assert finish_reason("length", 10, 100) == (StopReason.MAX_TOKENS, "")
    assert finish_reason("length", 100, 100) == (StopReason.CONTEXT_FULL, "")
    assert finish_reason("length", 100, 0) == (StopReason.MAX_TOKENS, "")
    assert finish_reason("content_filter", 1, 1)[0] == StopReason.ERROR


def test_url_forms_and_repr(monkeypatch):
    monkeypatch.setenv("SOME_KEY", "sk-very-secret")
    eng = RemoteEngine("localhost:8080/v1/", api_key_env="SOME_KEY")
    assert eng.base_url == "http://localhost:8080"
    assert RemoteEngine("https://gpu.example/api/v1").base_url == "https://gpu.example/api"
    assert "sk-very-secret" not in repr(eng)
