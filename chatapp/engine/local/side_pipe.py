"""The side pipe: tokenize and template requests, served on a thread even while generating."""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chatapp.engine.local.loaded_model import LoadedModel


def start(worker: LoadedModel, side: Connection) -> None:
    """Serve the side pipe on a daemon thread (it ends with the process or the pipe)."""
    threading.Thread(target=serve_side, args=(worker, side), daemon=True).start()


def serve_side(worker: LoadedModel, side: Connection) -> None:
    """Tokenize requests on their own pipe, answered even while a reply is generating."""
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
