"""The side pipe: tokenize, template and inspect requests, served on a thread even while
generating (the inspector has its own llama.cpp context, so a capture never waits for a reply)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatapp.engine.inspection import InspectRequest
    from chatapp.engine.local.inside.inspector import Inspector
    from chatapp.engine.local.load.loaded_model import LoadedModel


@dataclass(frozen=True)
class SideFailure:
    """The answer to a request that failed in the worker: the parent raises it as an error."""

    message: str


def start(worker: LoadedModel, side: Connection) -> None:
    """Serve the side pipe on a daemon thread (it ends with the process or the pipe)."""
    threading.Thread(target=serve_side, args=(worker, side), daemon=True).start()


def serve_side(worker: LoadedModel, side: Connection) -> None:
    """Tokenize requests on their own pipe, answered even while a reply is generating. Every
    request gets an answer (a SideFailure when it failed); if this thread ends for any other
    reason the pipe is closed, so the parent hears of it instead of waiting."""
    inspector: list[Inspector] = []  # made on the first capture, lives as long as the worker
    try:
        while True:
            try:
                msg = side.recv()
            except (EOFError, OSError):
                return
            _send(side, answer(worker, inspector, msg))
    finally:
        side.close()


def answer(worker: LoadedModel, inspector: list, msg: tuple) -> Any:
    """The reply to one request; a SideFailure (one sentence) when it raised."""
    try:
        if msg[0] == "tokenize":
            _, text, special = msg
            ids = worker.tokenize(text, add_bos=False, special=special)
            return worker.pieces(ids)
        if msg[0] == "template":
            return worker.render_prompt(msg[1])
        if msg[0] == "autotune_status":
            return getattr(worker, "autotune_status", None)
        if msg[0] == "inspect":
            return inspect(worker, inspector, msg[1])
        if msg[0] in ("steer_residuals", "steer_meter"):
            from chatapp.engine.local.inside.context_steering import side_call

            return side_call(worker, inspector, msg)
        return SideFailure(f"the model worker got an unknown request ({msg[0]!r})")
    except Exception as exc:
        return SideFailure(f"{msg[0]} failed in the model worker: {type(exc).__name__}: {exc}")


def _send(side: Connection, reply: Any) -> None:
    """Send a reply; one that cannot be pickled is sent as a SideFailure instead."""
    try:
        side.send(reply)
    except OSError:
        raise  # the parent is gone: serve_side ends
    except Exception as exc:  # pickling failed before anything was written
        side.send(SideFailure(f"the model worker could not send its answer ({exc})"))


def inspect(worker: LoadedModel, made: list, request: InspectRequest):
    """One capture (engine/local/inside/inspector.py), or a sentence saying why not."""
    from chatapp.engine.local.inside.inspector import Inspector, InspectorError

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
