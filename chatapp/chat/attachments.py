"""Files attached to a message: read as text, put in as fenced blocks headed by their names."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from chatapp import paths
from chatapp.engine.protocol import ChatMessage, Engine, EngineError
from chatapp.errors import ChatappError
from chatapp.gguf.header import ArrayValue, read_header

MAX_BYTES = 4 * 1024 * 1024  # past this a file is surely more than any context holds
STDIN = "-"
FENCE_LANGS = {
    ".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go",
    ".c": "c", ".h": "c", ".cpp": "cpp", ".java": "java", ".sh": "bash", ".md": "markdown",
    ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".csv": "csv",
    ".html": "html", ".css": "css", ".sql": "sql", ".diff": "diff", ".patch": "diff",
}  # fmt: skip
_FILE_LINE = re.compile(r"^/file\s+(.+?)\s*$")


class AttachmentError(ChatappError):
    """A file that cannot go into a message (binary, unreadable, missing); one sentence."""


@dataclass(frozen=True)
class Attachment:
    """A file as it goes into the message."""

    name: str  # as shown and as the block's heading (the path given, or "stdin")
    text: str  # the text sent (decoded as UTF-8)
    size_bytes: int
    tokens: int | None = None  # its block's tokens, once counted

    def block(self) -> str:
        """The fenced block: its name on a line, then the text in a fence no line can close."""
        longest = max((len(m) for m in re.findall(r"`{3,}", self.text)), default=2)
        fence = "`" * (longest + 1)
        lang = FENCE_LANGS.get(Path(self.name).suffix.lower(), "")
        body = self.text if self.text.endswith("\n") or not self.text else self.text + "\n"
        return f"{self.name}\n{fence}{lang}\n{body}{fence}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Attachment:
        return cls(data["name"], data["text"], int(data["size_bytes"]), data.get("tokens"))


def decode_text(data: bytes, name: str) -> str:
    """The bytes as text; AttachmentError when they are not (a NUL byte, or not UTF-8)."""
    if b"\0" in data[:8192]:
        raise AttachmentError(f"{name} is a binary file ({len(data):,} bytes); nothing was sent")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AttachmentError(
            f"{name} is not UTF-8 text (byte {exc.start:,} of {len(data):,}); nothing was sent"
        ) from None


STDIN_IN_CHAT = (
    "stdin is not available inside the chat (the app reads your keys from the terminal); "
    "give a path, or use `chatapp ask --file -` to attach what a pipe sends"
)
STDIN_FROM_TERMINAL = "reading the file from the terminal until Ctrl-D (or pipe it in)"


@dataclass(frozen=True)
class ByteLimit:
    """The most bytes a file may have; past it the file surely cannot fit (`why` says so)."""

    max_bytes: int
    why: str


ANY_CONTEXT = ByteLimit(MAX_BYTES, "more than any context holds")
BOUNDED_TOKENIZERS = ("gpt2", "llama")  # BPE and SentencePiece: a token is its piece's bytes


def longest_token_bytes(model_path: str) -> int | None:
    """The longest token of a GGUF model's vocabulary, in bytes as stored (its piece has at
    most that many); None when it cannot be told (not a GGUF file, or a tokenizer that
    normalizes text first, as T5's does, so a piece can stand for more bytes)."""
    try:
        key = os.stat(model_path)
    except (OSError, ValueError):
        return None
    return _longest_token_bytes(model_path, key.st_size, key.st_mtime_ns)


@lru_cache(maxsize=4)
def _longest_token_bytes(model_path: str, size: int, mtime_ns: int) -> int | None:
    try:
        metadata = read_header(model_path).metadata
    except (ChatappError, OSError):
        return None
    tokens = metadata.get("tokenizer.ggml.tokens")
    if metadata.get("tokenizer.ggml.model") not in BOUNDED_TOKENIZERS:
        return None
    if not isinstance(tokens, ArrayValue) or tokens.longest <= 0:
        return None
    return tokens.longest


def byte_limit(n_ctx: int, reply_room: int, longest_token: int | None) -> ByteLimit:
    """The bytes past which a file cannot fit a message: the tokens the context leaves beside
    the reply's room times the longest token's bytes (every token of the file holds at most
    that many of its bytes, so it needs at least bytes / longest tokens)."""
    room = max(0, n_ctx - reply_room)
    if not longest_token or room * longest_token >= MAX_BYTES:
        return ANY_CONTEXT
    return ByteLimit(
        room * longest_token,
        f"more than the {room:,} tokens a message may take in this context can hold (each "
        f"token holds at most {longest_token} bytes with this model); attach a part of it, "
        "or load the model with a larger --ctx",
    )


def _too_big(name: str, size: int | None, limit: ByteLimit) -> AttachmentError:
    size_text = f"{size:,} bytes" if size is not None else f"over {limit.max_bytes:,} bytes"
    return AttachmentError(f"{name} is {size_text}, {limit.why}; nothing was attached")


def read_attachment(
    path: str, stdin=None, *, limit: ByteLimit = ANY_CONTEXT, regular_only: bool = False
) -> Attachment:
    """A file (or standard input for "-") as an attachment; AttachmentError says why not.
    A file past `limit` is refused from its size, unread. `regular_only`: refuse devices and
    pipes (the chat: reading one would wait on the terminal or a writer that never comes)."""
    if path == STDIN:
        if regular_only:
            raise AttachmentError(STDIN_IN_CHAT)
        stream = stdin if stdin is not None else sys.stdin.buffer
        data = stream.read(limit.max_bytes + 1)
        name = "stdin"
    else:
        name = path
        data = _read_file(path, limit, regular_only)
    if len(data) > limit.max_bytes:
        raise _too_big(name, None, limit)
    return Attachment(name, decode_text(data, name), len(data))


def _read_file(path: str, limit: ByteLimit, regular_only: bool) -> bytes:
    p = paths.expand_user(path)
    try:
        if p.is_dir():
            raise AttachmentError(f"{path} is a folder; attach its files one by one")
        info = p.stat()
        if regular_only and not stat.S_ISREG(info.st_mode):
            raise AttachmentError(
                f"{path} is not a regular file (a device or a pipe); attach a file"
            )
        if stat.S_ISREG(info.st_mode) and info.st_size > limit.max_bytes:
            raise _too_big(path, info.st_size, limit)
        with p.open("rb") as fh:
            return fh.read(limit.max_bytes + 1)
    except FileNotFoundError:
        raise AttachmentError(f"{path} does not exist; nothing was sent") from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise AttachmentError(f"{path} cannot be read ({why}); nothing was sent") from None
    except ValueError:  # a NUL in the path: no file can have that name
        raise AttachmentError(
            f"{path!r} is not a file name (it holds a NUL character); nothing was sent"
        ) from None


def compose(text: str, attachments: list[Attachment] | tuple[Attachment, ...]) -> str:
    """The message as the model reads it: the typed text, then each file's block."""
    parts = [text.strip()] if text.strip() else []
    parts += [a.block() for a in attachments]
    return "\n\n".join(parts)


def split_file_lines(text: str) -> tuple[str, list[str]]:
    """`/file PATH` lines out of a typed message: (the rest of the text, the paths)."""
    kept, paths = [], []
    for line in text.splitlines():
        found = _FILE_LINE.match(line.strip())
        if found:
            paths.append(found.group(1).strip("'\""))
        else:
            kept.append(line)
    return "\n".join(kept).strip(), paths


def fit_problem(
    message_tokens: int,
    n_ctx: int,
    reply_budget: int,
    files: bool = True,
    system: bool = False,
) -> str:
    """One sentence when a message cannot fit the context even alone with room for the reply
    ("" when it fits). `files`: it has attached files (the remedy is to attach less);
    `system`: the count includes the system prompt (always sent with it)."""
    if message_tokens + reply_budget <= n_ctx:
        return ""
    what = "the message with the system prompt" if system else "the message"
    remedy = "attach less (or /trim: send only the start of the files)" if files else "shorten it"
    return (
        f"{what} is {message_tokens:,} tokens and the reply needs {reply_budget:,}, but the "
        f"context holds {n_ctx:,}; {remedy}, or load the model with a larger --ctx"
    )


def counted(engine: Engine, attachments: list[Attachment]) -> list[Attachment]:
    """The attachments with their blocks' token counts (left None where it cannot tell)."""
    return [count_one(engine, a) for a in attachments]


def count_one(engine: Engine | None, file: Attachment) -> Attachment:
    """The file with its block's token count (None when there is no engine or it failed)."""
    if engine is None:
        return file
    try:
        return replace(file, tokens=len(engine.tokenize(file.block(), special=False)))
    except EngineError:
        return file


def message_tokens(engine: Engine, content: str) -> int | None:
    """Tokens of one user message as the model reads it (its chat template included)."""
    try:
        n = engine.count_tokens([ChatMessage("user", content)])
        return n if n is not None else len(engine.tokenize(content, special=False))
    except EngineError:
        return None


def reply_budget(max_tokens: int, n_ctx: int) -> int:
    """The room kept for the reply when the context is filled (as ChatSession.fitted keeps)."""
    return min(max_tokens, n_ctx // 2)


FRAMING_TOKENS = 64  # room for a chat template's own tokens around two messages


def message_fit_problem(
    engine: Engine,
    n_ctx: int,
    budget: int,
    system_prompt: str,
    text: str,
    attachments: Sequence[Attachment] = (),
) -> str:
    """One sentence with the numbers when a message (with its files, and the system prompt
    that always goes with it) cannot fit n_ctx even alone with `budget` tokens for the reply;
    "" when it can, or when that cannot be told (no token count)."""
    content = compose(text, tuple(attachments)) if attachments else text
    head = [ChatMessage("system", system_prompt)] if system_prompt else []
    # Every token is at least one character: a short message surely fits (with room for the
    # template's framing).
    if len(content) + len(system_prompt) + FRAMING_TOKENS <= n_ctx - budget:
        return ""
    try:
        tokens = engine.count_tokens(head + [ChatMessage("user", content)])
        if tokens is None:
            both = f"{system_prompt}\n{content}" if head else content
            tokens = len(engine.tokenize(both, special=False))
    except EngineError:
        return ""
    return fit_problem(tokens, n_ctx, budget, files=bool(attachments), system=bool(head))


def trimmed(engine: Engine, files: Sequence[Attachment], room: int) -> list[Attachment]:
    """The files cut to their first tokens so their blocks take at most `room` tokens in all,
    earlier files first; each cut one says so at its end. Raises EngineError."""
    out: list[Attachment] = []
    for f in files:
        pieces = engine.tokenize(f.text, special=False)
        overhead = len(engine.tokenize(replace(f, text="").block(), special=False)) + 16
        keep = max(0, min(len(pieces), room - overhead))
        if keep < len(pieces):
            text = b"".join(p.piece for p in pieces[:keep]).decode("utf-8", "ignore")
            text += f"\n[cut here: the first {keep:,} of {len(pieces):,} tokens]\n"
            f = replace(f, text=text)
        tokens = len(engine.tokenize(f.block(), special=False))
        f = replace(f, tokens=tokens)
        room -= tokens
        out.append(f)
    return out
