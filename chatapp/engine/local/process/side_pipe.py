"""The side pipe: tokenize, template and inspect requests, served on a thread even while
generating (the inspector has its own llama.cpp context, so a capture never waits for a reply)."""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from chatapp.engine.local.pipe_messages import (
    AutotuneStatus,
    Inspect,
    RenderPrompt,
    SideFailure,
    SideRequest,
    SteerMeter,
    SteerResiduals,
    Tokenize,
    side_label,
)

if TYPE_CHECKING:
    from chatapp.engine.inspection import InspectRequest
    from chatapp.engine.local.inside.inspector import Inspector
    from chatapp.engine.local.load.loaded_model import LoadedModel


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


def answer(worker: LoadedModel, inspector: list, msg: SideRequest) -> Any:
    """The reply to one request; a SideFailure (one sentence) when it raised."""
    try:
        match msg:
            case Tokenize(text, special):
                return worker.pieces(worker.tokenize(text, add_bos=False, special=special))
            case RenderPrompt(request):
                return worker.render_prompt(request)
            case AutotuneStatus():
                return getattr(worker, "autotune_status", None)
            case Inspect(request):
                return inspect(worker, inspector, request)
            case SteerResiduals() | SteerMeter():
                return steer(worker, inspector, msg)
        return SideFailure(f"the model worker got an unknown request ({side_label(msg)!r})")
    except Exception as exc:
        what = side_label(msg)
        return SideFailure(f"{what} failed in the model worker: {type(exc).__name__}: {exc}")


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


def steer(worker: LoadedModel, made: list, msg: SteerResiduals | SteerMeter):
    """A steering request (engine/local/inside/context_steering.py): its answer, or a sentence
    saying why not."""
    from chatapp.engine.local.inside import context_steering
    from chatapp.engine.local.inside.inspector import Inspector, InspectorError
    from chatapp.engine.steering import SteeringError

    try:
        if not made:
            made.append(Inspector(worker))
        if isinstance(msg, SteerResiduals):
            return context_steering.residuals(worker, made[0], list(msg.texts), msg.at)
        return context_steering.meter(worker, made[0], msg.text, msg.units)
    except (InspectorError, SteeringError) as exc:
        return str(exc)
    except Exception as exc:  # an answer is owed: the parent waits on this pipe
        return f"reading the residual stream failed: {type(exc).__name__}: {exc}"
