"""The side pipe: tokenize, template and inspect requests, served on a thread even while
generating (the inspector has its own llama.cpp context, so a capture never waits for a reply)."""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chatapp.engine.inside import InspectRequest
    from chatapp.engine.local.inspector import Inspector
    from chatapp.engine.local.loaded_model import LoadedModel


def start(worker: LoadedModel, side: Connection) -> None:
    """Serve the side pipe on a daemon thread (it ends with the process or the pipe)."""
    threading.Thread(target=serve_side, args=(worker, side), daemon=True).start()


def serve_side(worker: LoadedModel, side: Connection) -> None:
    """Tokenize requests on their own pipe, answered even while a reply is generating."""
    inspector: list[Inspector] = []  # made on the first capture, lives as long as the worker
    while True:
        try:
            msg = side.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "tokenize":
            _, text, special = msg
            ids = worker.tokenize(text, add_bos=False, special=special)
            side.send(worker.pieces(ids))
        elif msg[0] == "template":
            side.send(worker.render_prompt(msg[1]))
        elif msg[0] == "autotune_status":
            side.send(getattr(worker, "autotune_status", None))
        elif msg[0] == "inspect":
            side.send(inspect(worker, inspector, msg[1]))
        elif msg[0] in ("steer_residuals", "steer_meter"):
            from chatapp.engine.local.steering import side_call

            side.send(side_call(worker, inspector, msg))


def inspect(worker: LoadedModel, made: list, request: InspectRequest):
    """One capture (engine/local/inspector.py), or a sentence saying why not."""
    from chatapp.engine.local.inspector import Inspector, InspectorError

    try:
        tokens = list(request.tokens)
        if request.prompt is not None:  # as the token loop makes a reply's prompt
            rendered, _ = worker.render_prompt(request.prompt)
            tokens = worker.tokenize(rendered, add_bos=worker.add_bos)
        if not tokens:
            return "there are no tokens to look at"
        if not made:
            made.append(Inspector(worker))
        return made[0].capture(
            tokens, request.position, request.chosen, request.top, request.neighbours
        )
    except InspectorError as exc:
        return str(exc)
    except Exception as exc:  # an answer is owed: the parent waits on this pipe
        return f"the capture failed: {type(exc).__name__}: {exc}"
