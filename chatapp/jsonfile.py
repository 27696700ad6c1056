"""JSON from disk or another tool's folder, read with size and depth limits (hostile input)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MAX_BYTES = 16 << 20  # no file this app reads as JSON is anywhere near 16 MiB
MAX_DEPTH = 64  # nor nested deeper than a few levels

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class JsonFileError(ValueError):
    """A JSON file that cannot be used: unreadable, too large, too deep or not JSON."""


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (strings do not count)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def parse(text: str, *, max_depth: int = MAX_DEPTH, where: str = "the JSON") -> Any:
    """Parse JSON text, refusing one nested deeper than max_depth (raises JsonFileError)."""
    if nesting_depth(text) > max_depth:
        raise JsonFileError(f"{where} nests deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JsonFileError(f"{where} is not valid JSON ({exc})") from None


def read(path: Path, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file's value; None when the file does not exist. Raises JsonFileError when it
    cannot be read, is larger than max_bytes, nests deeper than max_depth or is not JSON."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JsonFileError(f"cannot read {path} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise JsonFileError(f"{path} is larger than {max_bytes >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonFileError(f"{path} is not UTF-8 text") from None
    return parse(text, max_depth=max_depth, where=str(path))
