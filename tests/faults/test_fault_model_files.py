"""Bad model files through `chatapp ask`, `chatapp inspect` and the TUI: one clear sentence each.

Every case names the file and says what is wrong with it; the CLI prints it as one `error:` line
(no traceback, exit 1); the TUI shows it on the status line and keeps running and typing.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes.gguf_files import build, kv_str, tensor
from helpers import SIZE, one_error_line, pane, run_cli, status, submit, type_text, wait_until

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path
from chatapp.ui.app import ChatApp

BAD = "{p} is not a valid GGUF file: "
_LONG_NAME = [kv_str("general.name", "x" * 200), kv_str("general.architecture", "llama")]


def _bytes(data: bytes, name: str = "model.gguf") -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    return make


def _directory(folder: Path) -> Path:
    path = folder / "models.gguf"
    path.mkdir()
    return path


def _fifo(folder: Path) -> Path:
    path = folder / "pipe.gguf"
    os.mkfifo(path)
    return path


def _unreadable(folder: Path) -> Path:
    path = _bytes(build(), "locked.gguf")(folder)
    path.chmod(0)
    return path


def _unicode_link(folder: Path) -> Path:
    sub = folder / "mes modèles ✓"
    sub.mkdir()
    link = sub / "Smol LM 2 — ünï 135M.gguf"
    link.symlink_to(smollm2_path())
    return link


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], Path]
    message: str | None  # what the user reads ({p} = the path); None: the file works
    deny: bool = False  # open() refuses it (root reads mode-000 files, so this is simulated)
    header_ok: bool = False  # a valid header: `inspect` shows the card, llama.cpp refuses it


CASES = {
    "missing": Case(lambda d: d / "nope.gguf", "model file not found: {p}"),
    "empty": Case(_bytes(b""), "{p} is not a GGUF model file (it is empty)"),
    "wrong-magic": Case(
        _bytes(b"\0" * 64), "{p} is not a GGUF model file (it does not start with the GGUF magic)"
    ),
    "html-page": Case(
        _bytes(b"<!DOCTYPE html><html><body>404 Not Found</body></html>"),
        "{p} is not a GGUF model file (it is an HTML page, probably a failed download)",
    ),
    "version-1": Case(
        _bytes(build(version=1)),
        BAD + "GGUF version 1 is too old; llama.cpp reads versions 2 and 3",
    ),
    "version-99": Case(
        _bytes(build(version=99)),
        BAD + "GGUF version 99 is not supported; llama.cpp reads versions 2 and 3",
    ),
    "truncated-header": Case(
        _bytes(build(kvs=_LONG_NAME)[:120]),
        BAD + "the header is truncated (the value of 'general.name' at byte 56 runs past the "
        "end of the 120-byte file)",
    ),
    "truncated-data": Case(
        _bytes(build(data=b"\0" * 100)),
        "{p} is truncated (an incomplete download?): tensor 'blk.0.w' needs data up to byte 288 "
        "but the file has only 260 bytes",
    ),
    "huge-n-kv": Case(
        _bytes(build(n_kv=10**12)),
        BAD + "the header claims 1,000,000,000,000 metadata entries and 1 tensor, "
        "more than a 288-byte file can hold",
    ),
    "huge-n-tensors": Case(
        _bytes(build(n_tensors=2**40)),
        BAD + "the header claims 2 metadata entries and 1,099,511,627,776 tensors, "
        "more than a 288-byte file can hold",
    ),
    "zero-dimension": Case(
        _bytes(build(tensors=[tensor("blk.0.w", (32, 0))])),
        BAD + "tensor 'blk.0.w' has a zero-sized dimension [32, 0]",
    ),
    "duplicate-key": Case(
        _bytes(
            build(
                kvs=[kv_str("general.architecture", "llama"), kv_str("general.architecture", "x")]
            )
        ),
        BAD + "duplicate metadata key 'general.architecture'",
    ),
    "empty-key": Case(
        _bytes(build(kvs=[kv_str("general.architecture", "llama"), kv_str("", "x")])),
        BAD + "metadata entry #1 has an empty key",
    ),
    "directory": Case(_directory, "{p} is a directory, not a GGUF model file"),
    "fifo": Case(_fifo, "{p} is not a regular file, so it cannot be a GGUF model file"),
    "unreadable": Case(_unreadable, "cannot read {p}: permission denied", deny=True),
    "unknown-architecture": Case(
        _bytes(build(kvs=[kv_str("general.architecture", "frobnicator")])),
        "could not load {p}: llama.cpp says: unknown model architecture: 'frobnicator'",
        header_ok=True,
    ),
    "spaces-and-unicode": Case(_unicode_link, None),
}
IDS = list(CASES)
# The cases that load the real model (a valid file) are slow; the refusals are not.
LOADING_IDS = [
    pytest.param(name, marks=pytest.mark.slow) if case.message is None else name
    for name, case in CASES.items()
]


def _make(name: str, tmp_path: Path) -> tuple[Case, Path, str | None]:
    case = CASES[name]
    path = case.make(tmp_path)
    return case, path, None if case.message is None else case.message.format(p=path)


@pytest.mark.parametrize("name", LOADING_IDS)
def test_ask(name, tmp_path):
    case, path, expected = _make(name, tmp_path)
    r = run_cli(
        "ask", "Say hi.", "--model", str(path), "--max-tokens", "4", "--temperature", "0",
        "--ctx", "512", "--ngl", "0",
        deny=path if case.deny else None,
    )  # fmt: skip
    if expected is None:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip(), "the model answered"
        assert r.stderr.strip().splitlines()[-1].startswith("TTFT ")
        return
    assert one_error_line(r) == expected


@pytest.mark.parametrize("name", IDS)
def test_inspect(name, tmp_path):
    case, path, expected = _make(name, tmp_path)
    r = run_cli("inspect", str(path), deny=path if case.deny else None)
    if expected is None or case.header_ok:
        # A valid header: the card is shown (llama.cpp is not involved in `inspect`).
        assert r.returncode == 0, r.stderr
        assert f"file            {path}" in r.stdout
        if case.header_ok:
            assert (
                "warning         architecture 'frobnicator' is unknown to this llama.cpp; "
                "it may not load" in r.stdout
            )
        return
    assert one_error_line(r) == expected


@pytest.mark.parametrize("name", LOADING_IDS)
async def test_tui(name, tmp_path, monkeypatch):
    case, path, expected = _make(name, tmp_path)
    if case.deny:
        real_open = io.open

        def deny(file, *args, **kwargs):
            if isinstance(file, str | os.PathLike) and os.fspath(file) == str(path):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(io, "open", deny)
    options = LoadOptions(model_path=str(path), n_ctx=512, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: not app.slot.loading, timeout=60)
        if expected is None:
            assert status(app).startswith(f"ready: {path.name} loaded in ")
            pane(app).session.settings = pane(app).session.settings.with_(
                max_tokens=3, temperature=0.0
            )
            await submit(pilot, app, "Hi")
            await wait_until(pilot, lambda: len(pane(app).session.conversation) == 2, timeout=60)
            assert pane(app).session.conversation[1].content.strip()
            return
        assert status(app) == f"error: {expected}"
        assert app.slot.engine is None and app.is_running
        await type_text(pilot, app, "ok?")
        assert app.query_one("#prompt").text == "ok?"
        assert app.is_running
