"""`chatapp machine`: this machine's cores, caches and measured speed ceilings."""

from __future__ import annotations

from typing import Annotated

import typer

from chatapp.cli.typer_app import app


@app.command()
def machine(
    measure: Annotated[
        bool, typer.Option("--measure", help="measure the ceilings again (under 3 s)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
) -> None:
    """Usable cores, caches, memory read bandwidth and arithmetic peak, measured here."""
    from chatapp.commands.machine_report import run_machine

    raise typer.Exit(run_machine(measure, as_json))
