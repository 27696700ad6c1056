"""One token of a text as the engine tells it: id, exact bytes, special or not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenPiece:
    """One token of a text: its id, exact bytes, and whether llama.cpp marks it special
    (control, user-defined or unknown: chat-template markers such as <|im_start|>)."""

    id: int
    piece: bytes
    special: bool = False

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", errors="replace")
