"""Run by test_token_path_traced in a process of its own: stream one reply of the real model into
the real app under a profiler and print, as JSON, the chatapp files whose functions were handed,
held or returned a token (or the pipe's batch of events, or the reply that stores them)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "chatapp"


def _carries(value: object) -> bool:
    from chatapp.chat.live_reply import LiveReply
    from chatapp.engine.protocol import Token

    if isinstance(value, Token | LiveReply):
        return True
    if isinstance(value, list | tuple) and value and isinstance(value[0], Token):
        return True
    return type(value).__name__ in ("TokensArrived", "Events")  # (the pipe's batch of events)


async def _reply(model_path: str, crossed: set[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import pane, submit, wait_until

    from chatapp.config import Config
    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.engine.protocol import LoadOptions
    from chatapp.ui.app import ChatApp

    package = str(PACKAGE)

    def profile(frame, event, arg):
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(package):
            return
        held = [*frame.f_locals.values(), arg if event == "return" else None]
        if any(map(_carries, held)):
            crossed.add(str(Path(frame.f_code.co_filename).relative_to(PACKAGE)))

    options = LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options), config=Config(autotune=False))
    threading.setprofile(profile)  # (threads started from now: the one a reply is read in)
    sys.setprofile(profile)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.slot.engine is not None, 120)
            crossed.clear()
            await submit(pilot, app, "Name three colours.")
            await wait_until(
                pilot, lambda: pane(app).last_reply is not None and pane(app).reply is None, 120
            )
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


if __name__ == "__main__":
    found: set[str] = set()
    asyncio.run(_reply(sys.argv[1], found))
    print(json.dumps(sorted(found)))
