"""Make any text safe to draw: control characters become visible symbols, never raw bytes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TextIO

# C0 controls except tab and newline, DEL, C1 controls, and lone surrogates.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # Unicode control pictures: ␀ ␛ ...
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}" if code < 0x100 else "\ufffd"


def printable(text: str) -> str:
    """Text with control characters and lone surrogates replaced by visible symbols."""
    return _UNSAFE.sub(_visible, text)


def for_terminal(text: str) -> str:
    """Text a terminal shows as text: newlines and tabs kept (CR LF as a newline); every other
    control character, the ESC that starts an escape sequence among them, made visible."""
    return printable(text.replace("\r\n", "\n"))


# Every character str.splitlines() breaks a line at, as an escape that keeps the line whole.
_LINE_BREAKS = {
    ord(ch): ch.encode("unicode_escape").decode("ascii")
    for ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
}


def one_line(text: str) -> str:
    """Text for a line of its own (an `error:` line): each line break in it, a newline in a
    path or a value the user gave, written as its escape (`\\n`), so the line stays one."""
    return text.translate(_LINE_BREAKS)


def _unchanged(text: str) -> str:
    return text


def for_stream(stream: TextIO) -> Callable[[str], str]:
    """What text written to `stream` goes through: `for_terminal` when it is a terminal (a
    reply or a file could set its title, write its clipboard or clear it); into a pipe or a
    file, nothing: the text stays exactly as it was."""
    isatty = getattr(stream, "isatty", None)
    return for_terminal if isatty is not None and isatty() else _unchanged


def escape_bytes(data: bytes) -> str:
    """Bytes as text: printable ASCII as is, everything else as \\xNN."""
    out = []
    for b in data:
        if 0x20 <= b < 0x7F and b != 0x5C:
            out.append(chr(b))
        elif b == 0x5C:
            out.append("\\\\")
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def token_display(piece: bytes) -> str:
    """How a token looks in the token panel: visible whitespace, escaped partial bytes."""
    try:
        text = piece.decode("utf-8")
    except UnicodeDecodeError:
        return escape_bytes(piece)
    text = printable(text)
    return text.replace("\n", "↵\n").replace("\t", "⇥")
