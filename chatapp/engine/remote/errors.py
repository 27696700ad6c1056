"""One-sentence messages for what goes wrong between chatapp and an OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import httpx

_CONTEXT = re.compile(
    r"context[ _](length|size|window)|exceeds? (the )?(available )?context|"
    r"maximum context|too many tokens|prompt is too long|exceed_context",
    re.IGNORECASE,
)
_CONTEXT_SIZE = re.compile(
    r"(?:maximum context length is|context window of|context size\W{0,2}(?:of |is )?|n_ctx\W{0,3})"
    r"\s*(\d+)",
    re.IGNORECASE,
)


class HTTPFailure(Exception):
    """A server answered a reply's request with an error status (read by RemoteEngine)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


_DNS_FAILURES = ("name or service", "nodename", "name resolution", "getaddrinfo", "no address")


def scrub(text: str, secret: str | None) -> str:
    """The text with the secret (an API key) blanked out, should a server echo it."""
    if secret:
        text = text.replace(secret, "***")
    return text


def one_line(text: str, limit: int = 160) -> str:
    """The first sentence of a server's text, on one line, shortened, without its final period."""
    text = " ".join(str(text).split())
    match = re.search(r"(?<=[a-z0-9)\]'\"`])\. (?=[A-Z])", text)
    if match:
        text = text[: match.start()]
    text = text.rstrip(". ")
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return text


def server_message(body: bytes | str | dict | None) -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, FastAPI's "detail"..."""
    data = body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            data = json.loads(body)
        except ValueError:
            return one_line(body) if body.strip() else ""
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("msg") or value.get("type")
            if isinstance(value, list) and value and isinstance(value[0], dict):
                value = value[0].get("msg")  # FastAPI validation errors
            if value:
                return one_line(str(value))
    return one_line(str(data)) if data else ""


def context_message(message: str) -> str | None:
    """The sentence for a prompt that does not fit the server's context, if that is what it is."""
    if not _CONTEXT.search(message):
        return None
    size = _CONTEXT_SIZE.search(message)
    where = f"the server's context of {size.group(1)} tokens" if size else "the server's context"
    return (
        f"the conversation is too long for {where}; clear the chat, shorten the prompt "
        "or lower max tokens"
    )


def status_message(
    status: int,
    body: bytes | str | dict | None,
    *,
    base_url: str,
    api_key_env: str | None,
    model: str | None,
    models: tuple[str, ...] = (),
    path: str = "",
) -> str:
    """The sentence for an HTTP error status from the server."""
    detail = server_message(body)
    if status in (401, 403):
        if api_key_env:
            return f"the server refused the API key ({status}); set the key in ${api_key_env}"
        return (
            f"the server wants an API key ({status}); put it in an environment variable "
            "and pass its name with --api-key-env"
        )
    if status in (400, 413, 422) and (ctx := context_message(detail)):
        return ctx
    if status in (400, 404) and model and "model" in detail.lower():
        known = f"; it has: {', '.join(models[:6])}" if models else ""
        return f"the server has no model named {model!r}{known}"
    if status == 404:
        what = path or "such endpoint"
        return f"{base_url} has no {what} (404); is it an OpenAI-compatible server?"
    if status == 429:
        return f"the server is busy or rate-limited (429){_colon(detail)}"
    if status >= 500:
        return f"the server failed with {status}{_colon(detail)}"
    return f"the server rejected the request ({status}){_colon(detail)}"


def stream_error_message(payload, n_tokens: int) -> str:
    """The sentence for an error the server reported inside a 200 stream."""
    detail = server_message(payload if isinstance(payload, dict) else {"error": payload})
    if ctx := context_message(detail):
        return ctx
    return f"the server reported an error after {_tokens(n_tokens)}{_colon(detail)}"


def transport_message(
    exc: Exception,
    *,
    base_url: str,
    connect_timeout: float,
    read_timeout: float,
    n_tokens: int | None = None,
) -> str:
    """The sentence for a connection that failed, timed out or dropped (n_tokens: mid-reply)."""
    text = str(exc).lower()
    if isinstance(exc, httpx.ConnectTimeout):
        return (
            f"cannot connect to {base_url}: no answer within {connect_timeout:g} s; "
            "check the address, the port and any firewall"
        )
    if isinstance(exc, httpx.ConnectError):
        if "refused" in text:
            return f"cannot connect to {base_url}: connection refused; is the server running?"
        if any(s in text for s in _DNS_FAILURES):
            host = httpx.URL(base_url).host
            return f"cannot connect to {base_url}: the host name {host!r} was not found (DNS)"
        if "unreachable" in text:
            return f"cannot connect to {base_url}: the network or host is unreachable"
        if "ssl" in text or "certificate" in text:
            return f"cannot connect to {base_url}: the TLS handshake failed ({one_line(text, 80)})"
        return f"cannot connect to {base_url}: {one_line(text, 100) or type(exc).__name__}"
    if isinstance(exc, httpx.TimeoutException):
        if n_tokens:
            return f"the server sent nothing for {read_timeout:g} s after {_tokens(n_tokens)}"
        return f"the server at {base_url} did not answer within {read_timeout:g} s"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        if n_tokens is not None:
            return f"the server closed the stream after {_tokens(n_tokens)}"
        return f"the server at {base_url} closed the connection without answering"
    return f"talking to {base_url} failed: {type(exc).__name__}: {one_line(str(exc), 100)}"


def _tokens(n: int) -> str:
    return "1 token" if n == 1 else f"{n} tokens"


def _colon(detail: str) -> str:
    return f": {detail}" if detail else ""
