"""The one way to open an engine: a local model file (worker process) or a server."""

from __future__ import annotations

from chatapp.engine.protocol import Engine, LoadOptions


def make_engine(
    options: LoadOptions | None, server: str | None = None, *, nice: int = 0, **remote
) -> Engine:
    """An engine, not yet started: RemoteEngine when `server` is given, else LocalEngine.

    `start()` does the recoveries for every caller: a GPU step-down when the model does not
    fit, the CPU-buffer fallback when llama.cpp's AMX/repack path crashes (see
    `LocalEngine.start`), and says what it did in `engine.notes`. `nice` lowers the local
    worker's priority (the TUI's choice); `remote` holds RemoteEngine's options, empty ones
    left out.
    """
    if server:
        from chatapp.engine.remote.client import RemoteEngine

        return RemoteEngine(server, **{k: v for k, v in remote.items() if v is not None})
    if options is None:
        raise ValueError("make_engine needs LoadOptions or a server")
    from chatapp.engine.local.process.local_engine import LocalEngine

    return LocalEngine(options, nice=nice)
