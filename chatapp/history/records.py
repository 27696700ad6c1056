"""The records of the chat history (conversations, messages, model fingerprints) as dataclasses."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from chatapp.errors import ChatappError
from chatapp.gguf.header import file_quant
from chatapp.metrics import GenerationStats
from chatapp.sampling import SamplerSettings, SettingsError

HEADER_BYTES = 1 << 20
"""model_fingerprint hashes this much of the file: the GGUF header and metadata, not weights."""


class StoreError(ChatappError):
    """A history problem the user can act on; str() is one sentence."""


class MessageStatus(StrEnum):
    """Where a message is in its life."""

    COMPLETE = "complete"
    STREAMING = "streaming"  # a reply being generated (or its process died: see interrupted)
    INTERRUPTED = "interrupted"  # the process died or the user stopped it before the end
    ERROR = "error"  # the reply failed; `error` says why


@dataclass(frozen=True)
class ModelFingerprint:
    """Which model file wrote a reply."""

    path: str
    """File path (or a server model name for remote engines)."""
    size: int | None = None
    """File size in bytes."""
    quant: str = ""
    """Quantization, e.g. Q4_K_M (guessed from the file name unless the engine told us)."""
    sha256: str | None = None
    """sha256 of the first HEADER_BYTES of the file (header + metadata), not of the whole file."""


@dataclass(frozen=True)
class Conversation:
    """One chat, without its messages."""

    id: int
    title: str
    created: float
    """Unix time."""
    updated: float
    """Unix time of the last change (new message, finished reply, rename)."""
    system_prompt: str = ""
    model_path: str = ""
    sampler: SamplerSettings | None = None
    message_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversation:
        """The inverse of to_dict."""
        data = dict(data)
        data["sampler"] = _sampler_from(data.get("sampler"))
        return cls(**data)


@dataclass(frozen=True)
class Message:
    """One turn of a conversation, with how it was made when it is a reply."""

    id: int
    conversation_id: int
    seq: int
    """Position in the conversation, from 1."""
    role: str
    text: str
    created: float
    updated: float
    status: MessageStatus = MessageStatus.COMPLETE
    model: ModelFingerprint | None = None
    sampler: SamplerSettings | None = None
    ttft_s: float | None = None
    prefill_tps: float | None = None
    decode_tps: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    stats: dict[str, Any] | None = None
    """GenerationStats.to_dict() of the reply (all timings)."""
    stop_reason: str | None = None
    error: str | None = None
    parent_id: int | None = None
    """The message this one follows (None: the first); messages with one parent are branches."""
    chosen: bool = True
    """The branch the conversation goes on with, among the messages with the same parent."""
    branch: int = 1
    """Which of its branches this is, from 1 in the order they were made (Store.messages)."""
    branches: int = 1
    """How many branches there are at this message (itself included)."""
    attachments: tuple[dict[str, Any], ...] = ()
    """Files attached to a user message: name, size_bytes, tokens and the text that was sent
    (the message's text holds them too, as fenced blocks, as the model read them)."""
    steering: dict[str, Any] | None = None
    """The control vectors a reply was steered with (engine/steering.py's Steering.to_dict:
    vectors with name, path and strength, layers, and changes made during the reply)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The inverse of to_dict."""
        data = dict(data)
        data["status"] = MessageStatus(data.get("status", "complete"))
        data["sampler"] = _sampler_from(data.get("sampler"))
        model = data.get("model")
        data["model"] = ModelFingerprint(**model) if model else None
        data["attachments"] = tuple(data.get("attachments") or ())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class SearchHit:
    """A message (or a title, when message_id is None) that contains the searched text."""

    conversation_id: int
    message_id: int | None
    title: str
    role: str
    snippet: str
    """The text around the first match, on one line."""
    created: float


def conversation_from_row(row: sqlite3.Row) -> Conversation:
    """A Conversation from a conversations row (with a message_count column)."""
    return Conversation(
        id=row["id"],
        title=row["title"],
        created=row["created"],
        updated=row["updated"],
        system_prompt=row["system_prompt"],
        model_path=row["model_path"],
        sampler=_sampler_from(row["sampler"]),
        message_count=row["message_count"],
    )


def message_from_row(row: sqlite3.Row) -> Message:
    """A Message from a messages row (with branch and branches columns, if it has them)."""
    keys = row.keys()
    model = None
    if row["model_path"] is not None:
        model = ModelFingerprint(
            path=row["model_path"],
            size=row["model_size"],
            quant=row["model_quant"] or "",
            sha256=row["model_sha256"],
        )
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        seq=row["seq"],
        role=row["role"],
        text=row["text"],
        created=row["created"],
        updated=row["updated"],
        status=MessageStatus(row["status"]),
        model=model,
        sampler=_sampler_from(row["sampler"]),
        ttft_s=row["ttft_s"],
        prefill_tps=row["prefill_tps"],
        decode_tps=row["decode_tps"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        stats=json.loads(row["stats"]) if row["stats"] else None,
        stop_reason=row["stop_reason"],
        error=row["error"],
        parent_id=row["parent_id"],
        chosen=bool(row["chosen"]),
        branch=row["branch"] if "branch" in keys else 1,
        branches=row["branches"] if "branches" in keys else 1,
        attachments=tuple(json.loads(row["attachments"])) if row["attachments"] else (),
        steering=json.loads(row["steering"]) if row["steering"] else None,
    )


def hit_from_row(row: sqlite3.Row, needle: str) -> SearchHit:
    """A SearchHit from a search row (message_id is NULL for a title match)."""
    return SearchHit(
        conversation_id=row["conversation_id"],
        message_id=row["message_id"],
        title=row["title"],
        role=row["role"],
        snippet=snippet(row["text"], needle),
        created=row["created"],
    )


def model_columns(model: ModelFingerprint | None) -> tuple[Any, ...]:
    """model_path, model_size, model_quant, model_sha256 of a messages row."""
    if model is None:
        return (None, None, None, None)
    return (model.path, model.size, model.quant, model.sha256)


def stats_columns(s: GenerationStats | None) -> tuple[Any, ...]:
    """ttft_s, prefill_tps, decode_tps, prompt_tokens, completion_tokens, stats of a row."""
    if s is None:
        return (None,) * 6
    data = json.dumps(s.to_dict(), sort_keys=True)
    return (s.ttft_s, s.prefill_tps, s.decode_tps, s.prompt_tokens, s.completion_tokens, data)


def dumps_sampler(sampler: SamplerSettings | None) -> str | None:
    """Sampler settings as the JSON kept in the database."""
    return None if sampler is None else json.dumps(sampler.to_dict(), sort_keys=True)


def _sampler_from(value: str | dict[str, Any] | None) -> SamplerSettings | None:
    if not value:
        return None
    try:
        data = json.loads(value) if isinstance(value, str) else value
        return SamplerSettings.from_dict(data)
    except (ValueError, TypeError, SettingsError):
        return None  # written by a chatapp with other sampler fields: show the reply without it


_fingerprints: dict[tuple[str, int, int], ModelFingerprint] = {}
_fingerprints_lock = threading.Lock()


def model_fingerprint(path: str | Path, quant: str = "") -> ModelFingerprint:
    """Path, size, quant and sha256 of the first 1 MiB of a model file.

    Cached per (path, mtime, size), so calling it for every reply costs one stat().
    `quant` (e.g. ModelInfo.quant from the engine) saves reading the header for it
    (gguf_header.file_quant: the header's file type, else the file name).
    Raises StoreError when the file cannot be read.
    """
    resolved = os.path.realpath(path)
    try:
        st = os.stat(resolved)
        key = (resolved, st.st_mtime_ns, st.st_size)
        with _fingerprints_lock:
            cached = _fingerprints.get(key)
        if cached is None:
            with open(resolved, "rb") as f:
                digest = hashlib.sha256(f.read(HEADER_BYTES)).hexdigest()
    except OSError as exc:
        raise StoreError(f"cannot read the model file {path} ({exc.strerror or exc})") from None
    if cached is None:
        cached = ModelFingerprint(str(path), st.st_size, file_quant(resolved), digest)
        with _fingerprints_lock:
            _fingerprints[key] = cached
    if cached.path != str(path) or (quant and quant != cached.quant):
        return ModelFingerprint(str(path), cached.size, quant or cached.quant, cached.sha256)
    return cached


def title_from(text: str, limit: int = 60) -> str:
    """A conversation title from its first user message: the first line, shortened."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line or "New chat"


def snippet(text: str, needle: str, width: int = 80) -> str:
    """`width` characters of text around the first (case-insensitive) match, on one line."""
    flat = " ".join(text.split())
    at = flat.lower().find(needle.lower())
    if at < 0 or len(flat) <= width:
        return flat[:width]
    start = max(0, min(at - width // 3, len(flat) - width))
    out = flat[start : start + width]
    return ("…" if start else "") + out + ("…" if start + width < len(flat) else "")
