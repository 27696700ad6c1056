"""What the chat's Copy actions put on the clipboard: a reply, its fenced code blocks one at a
time, the whole conversation as Markdown."""

from __future__ import annotations

import re
from collections.abc import Sequence

from chatapp.chat.thinking import split_reply
from chatapp.engine.protocol import ChatMessage

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
ROLE_TITLES = {"user": "You", "assistant": "Assistant", "system": "System"}
# The clipboard is written with OSC 52 (ESC ] 52 ; c ; BASE64 BEL). Terminals cap that sequence:
# ChromeOS's hterm takes 100,000 bytes (its osc52.sh sends nothing longer; vim-oscyank's default
# cap is the same), others drop or cut longer ones silently. So no longer one is sent.
OSC52_MAX_BYTES = 100_000
OSC52_FRAME = len("\x1b]52;c;\a")
CLIPBOARD_MAX_BYTES = (OSC52_MAX_BYTES - OSC52_FRAME) // 4 * 3  # of UTF-8 text: 74,994


def code_blocks(markdown: str) -> list[str]:
    """The contents of each fenced code block (``` or ~~~, any length), in order; an unclosed
    block runs to the end, as Markdown renders it."""
    blocks: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group("fence")
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if (
                close
                and close.group("fence")[0] == fence[0]
                and len(close.group("fence")) >= len(fence)
                and not close.group("info").strip()
            ):
                break
            body.append(lines[i])
            i += 1
        blocks.append("\n".join(body))
        i += 1
    return blocks


def reply_text(content: str) -> str:
    """A reply as it is read: its answer, without the model's folded reasoning."""
    return split_reply(content).answer if content else ""


def last_reply(messages: Sequence[ChatMessage]) -> str | None:
    """The last assistant message's answer, or None when there is none yet."""
    for m in reversed(messages):
        if m.role == "assistant":
            return reply_text(m.content)
    return None


def conversation_markdown(messages: Sequence[ChatMessage], title: str = "") -> str:
    """The conversation as Markdown: a heading per message (replies without their reasoning)."""
    parts = [f"# {title}"] if title else []
    for m in messages:
        text = reply_text(m.content) if m.role == "assistant" else m.content
        parts.append(f"## {ROLE_TITLES.get(m.role, m.role)}\n\n{text.strip()}")
    return "\n\n".join(parts) + "\n"


def describe(what: str, text: str) -> str:
    """The notice after a copy: what, and how long."""
    lines = text.count("\n") + 1 if text else 0
    return f"copied {what}: {len(text):,} characters, {lines:,} line{'s' if lines != 1 else ''}"


def fits_clipboard(text: str) -> bool:
    """Whether OSC 52 can carry the text to the terminal's clipboard (CLIPBOARD_MAX_BYTES)."""
    return len(text.encode("utf-8", "surrogatepass")) <= CLIPBOARD_MAX_BYTES


def too_large(what: str, text: str) -> str:
    """The notice when a copy is refused: what, its size, the limit and what to do instead."""
    size = len(text.encode("utf-8", "surrogatepass"))
    return (
        f"not copied: {what} is {size:,} bytes, more than the {CLIPBOARD_MAX_BYTES:,} a terminal "
        "takes through OSC 52 (its clipboard sequence); `chatapp history show` prints the chat"
    )
