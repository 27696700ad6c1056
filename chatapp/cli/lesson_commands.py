"""`chatapp lesson`: a guided tour of how the model writes, on this model and machine."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from chatapp.cli.typer_app import app
from chatapp.errors import UsageError


@app.command()
def lesson(
    steps: Annotated[bool, typer.Option("--steps", help="list the steps and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="with --steps: JSON on stdout")] = False,
    step: Annotated[str | None, typer.Option("--step", help="open the chat at this step")] = None,
) -> None:
    """Open the chat with the lesson on, where it stopped (or at --step ID)."""
    from chatapp.chat import lesson as tour

    if steps:
        rows = [s.to_dict() for s in tour.STEPS]
        if as_json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['id']:<10} {r['title']:<24} {r['panel']:<11} try: {r['try']}")
        return
    if as_json:
        raise UsageError("--json goes with --steps")
    try:
        index = tour.remembered() if step is None else tour.step_index(step)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from chatapp.cli.chat_commands import chat

    chat(lesson_step=index)
