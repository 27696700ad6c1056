"""The engine's errors: one the user can act on, and the worker process dying."""

from __future__ import annotations

from chatapp.errors import ChatappError


class EngineError(ChatappError):
    """A problem of the engine the user can act on (a load that failed, a full context, a dead
    server); str() is a sentence. A file that is not a usable model is a ModelFileError."""


class EngineCrashed(EngineError):
    """The worker process died; carries the last lines of its log."""

    def __init__(self, message: str, log_tail: str = "", exitcode: int | None = None) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.exitcode = exitcode
