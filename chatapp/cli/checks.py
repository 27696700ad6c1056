"""Checks the command line makes on a value as it enters, before anything loads."""

from __future__ import annotations

import typer


def some_text(value: str | None) -> str | None:
    """A prompt or text argument's check (a typer callback): one that is empty or only
    whitespace is refused, naming the argument (None: not given, left to the command)."""
    if value is not None and not value.strip():
        shown = "empty" if not value else "only whitespace"
        raise typer.BadParameter(f"it is {shown}: give some text")
    return value
