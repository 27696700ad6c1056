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


def some_file(value: str | list[str] | None) -> str | list[str] | None:
    """A file option's check (a typer callback; a repeatable one gets the list): an empty or
    blank name is refused, naming the option, where it would read as the current folder."""
    for name in [value] if isinstance(value, str) else value or []:
        if not name.strip():
            raise typer.BadParameter("it is empty: give a file")
    return value
