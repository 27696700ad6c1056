"""JSON from disk or another tool's folder, read with size and depth limits (hostile input);
the app's own JSON files kept aside when broken, never overwritten, and updated under a lock."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from chatapp import paths
from chatapp.textsafe import printable

MAX_BYTES = 16 << 20  # no file this app reads as JSON is anywhere near 16 MiB
MAX_DEPTH = 64  # nor nested deeper than a few levels

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


LOCK_TIMEOUT_S = 10.0  # another process holds a file's lock longer than this: give up


class JsonFileError(ValueError):
    """A JSON file that cannot be used: unreadable, too large, too deep or not JSON."""


class BrokenJsonError(JsonFileError):
    """The file was read but its content is not usable: too large, too deep, not UTF-8, not
    JSON (a file that could not be read at all, such as one without permission, is not)."""


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
        raise BrokenJsonError(f"{where} nests deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BrokenJsonError(f"{where} is not valid JSON ({exc})") from None


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
        raise BrokenJsonError(f"{path} is larger than {max_bytes >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BrokenJsonError(f"{path} is not UTF-8 text") from None
    return parse(text, max_depth=max_depth, where=str(path))


# -- the app's own files of a JSON object (prompts.json, state.json, machine.json, ...) --------

_listeners: list[Callable[[str], None]] = []
_unheard: list[str] = []  # said while nobody listened (on stderr): a listener gets them too


def listen(listener: Callable[[str], None]) -> None:
    """Send the sentences saying a broken file was kept aside to listener (the TUI's
    notifications) instead of stderr, until unlisten; it first gets those said on stderr
    before anyone listened (a TUI's own terminal hides them)."""
    pending, _unheard[:] = list(_unheard), []
    for sentence in pending:
        listener(sentence)
    _listeners.append(listener)


def unlisten(listener: Callable[[str], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def _tell(sentence: str) -> None:
    if _listeners:
        _listeners[-1](sentence)
        return
    _unheard.append(sentence)
    try:
        print(f"warning: {printable(sentence)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # no stderr (a closed one): the next listener hears it


_collecting: ContextVar[list[Path] | None] = ContextVar("jsonfile_kept_aside", default=None)


@contextmanager
def kept_aside() -> Iterator[list[Path]]:
    """The files kept aside within the block, in this thread, where they went (each is told
    as always too): for a screen that says so where the user looks."""
    found: list[Path] = []
    token = _collecting.set(found)
    try:
        yield found
    finally:
        _collecting.reset(token)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold PATH.lock (a lock between processes, released if one dies). Raises OSError
    (filelock's Timeout is one) when another holds it past LOCK_TIMEOUT_S."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(path.name + ".lock")), timeout=LOCK_TIMEOUT_S):
        yield


def read_dict(path: Path) -> dict[str, Any]:
    """A JSON object file of the app's ({} when missing or unreadable). One whose content is
    broken (a hand edit's trailing comma, not an object) is kept aside under a new name and
    the user told where; it is never overwritten."""
    try:
        data = read(path)
        if data is None or isinstance(data, dict):
            return data or {}
    except BrokenJsonError:
        pass  # kept aside below
    except JsonFileError:
        return {}
    try:
        with locked(path):  # another process may have kept it aside and written anew
            return _read_under_lock(path)
    except (OSError, JsonFileError):
        return {}


def update(path: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Read, change in place, and write back a JSON object file under its lock, atomically:
    two processes updating it at once both keep their changes. A broken file is kept aside
    first (the change starts from {}). Raises OSError when it cannot be locked or written,
    JsonFileError when it cannot be read (it is then left as it is), and whatever change
    raises (nothing is written then). Returns what was written."""
    with locked(path):
        data = _read_under_lock(path)
        change(data)
        paths.write_json_atomic(path, data)
    return data


def _read_under_lock(path: Path) -> dict[str, Any]:
    """The file's object; a broken one is kept aside (and {} returned). JsonFileError when
    it cannot be read at all."""
    try:
        data = read(path)
    except BrokenJsonError as exc:
        _keep_aside(path, str(exc))
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        _keep_aside(path, f"{path} holds {type(data).__name__} where an object belongs")
        return {}
    return data


def _keep_aside(path: Path, why: str) -> Path | None:
    """Rename a broken file to PATH.broken-YYYYmmdd-HHMMSS (a free name) and say so."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.broken-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.broken-{stamp}-{n}")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return None  # gone meanwhile (another app's doing): nothing to keep
    except OSError as exc:
        raise JsonFileError(f"{why}; it could not be kept aside ({exc.strerror or exc})") from None
    _tell(f"{why}; it was kept as {aside}, and chatapp starts a new {path.name}")
    collecting = _collecting.get()
    if collecting is not None:
        collecting.append(aside)
    return aside
