"""A small server-sent events reader: lines in, (event, data) pairs out."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SSEvent:
    """One dispatched event: its type ("message" unless named) and its joined data lines."""

    event: str
    data: str


def iter_sse(lines: Iterable[str]) -> Iterator[SSEvent]:
    """Parse text/event-stream lines (without their line endings) as the SSE spec does.

    Data lines are joined with newlines and dispatched at a blank line; comments (":" lines)
    and unknown fields are skipped; an event still pending when the lines end is dispatched.
    """
    event = ""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SSEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield SSEvent(event or "message", "\n".join(data))
