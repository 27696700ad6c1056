"""How a refused schema is named: the error, a part's place as a JSON pointer, a value shown."""

from __future__ import annotations

import json
import re

from chatapp.engine.protocol import EngineError
from chatapp.textsafe import printable


class GrammarError(EngineError):
    """A schema or grammar file that cannot be used; str() is one sentence naming the part."""


_PLAIN_POINTER = re.compile(r"[A-Za-z0-9_$/~.#-]+")


def place(path: tuple[str, ...]) -> str:
    """A path as the sentences name it: a JSON pointer, `/properties/age/maximum` (quoted
    when a name in it has spaces or odd characters)."""
    if not path:
        return "the top of the schema"
    parts = [p if len(p) <= 40 else p[:40] + "…" for p in path]
    pointer = "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)
    if _PLAIN_POINTER.fullmatch(pointer):
        return pointer
    return printable(json.dumps(pointer, ensure_ascii=False))


def shown(value) -> str:
    """A JSON value in a sentence: short, one line, printable (containers by their kind)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        value = value if len(value) <= 40 else value[:40] + "…"
        return printable(json.dumps(value, ensure_ascii=False))
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return printable(str(value))[:40]


def fail(path: tuple[str, ...], what: str) -> GrammarError:
    """The error for the part at `path`: its place, then what is wrong with it."""
    return GrammarError(f"{place(path)} {what}")


def text(value: str, path: tuple[str, ...]) -> str:
    """A string that is text (a lone surrogate from a \\ud800 escape is not: llama.cpp gets
    UTF-8)."""
    if not isinstance(value, str):
        raise fail(path, f"has the name {shown(value)}, which is not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(path, "holds a lone surrogate (a \\ud800 escape), which is not text") from None
    return value
