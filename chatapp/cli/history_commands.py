"""`chatapp history ...` (saved conversations) and `chatapp config ...` (the config file)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.options import JsonOpt
from chatapp.cli.typer_app import config_app, history_app


class ExportFormat(StrEnum):
    """Formats of `history export`."""

    md = "md"
    json = "json"


MOST_ROWID = 2**63 - 1  # SQLite's largest INTEGER: an id or a count past it is none
ConversationId = Annotated[
    int,
    typer.Argument(min=1, max=MOST_ROWID, help="conversation id (see `history list`)"),
]


@history_app.command("list")
def history_list_command(
    as_json: JsonOpt = False,
    limit: Annotated[
        int | None, typer.Option(min=1, max=MOST_ROWID, help="show at most this many")
    ] = None,
) -> None:
    """List saved conversations, most recently updated first."""
    from chatapp.commands.history import history_list

    raise typer.Exit(history_list(as_json, limit))


@history_app.command("show")
def history_show_command(conversation_id: ConversationId) -> None:
    """Print one conversation, with the stats of each reply."""
    from chatapp.commands.history import history_show

    raise typer.Exit(history_show(conversation_id))


@history_app.command("export")
def history_export_command(
    conversation_id: ConversationId,
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", "-f", help="md: Markdown with stats per reply; json: everything"),
    ] = ExportFormat.md,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="write to this file (default: stdout)")
    ] = None,
) -> None:
    """Export one conversation as Markdown or JSON."""
    from chatapp.commands.history import history_export

    raise typer.Exit(history_export(conversation_id, fmt.value, out))


@history_app.command("delete")
def history_delete_command(
    conversation_id: ConversationId,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask first")] = False,
) -> None:
    """Delete one conversation and its messages."""
    from chatapp.commands.history import history_delete

    raise typer.Exit(history_delete(conversation_id, yes))


@config_app.command("path")
def config_path_command() -> None:
    """Print where the config file is (CHATAPP_CONFIG overrides it)."""
    from chatapp.commands.config import config_path

    raise typer.Exit(config_path())


@config_app.command("show")
def config_show_command() -> None:
    """Print the effective config as TOML; problems go to stderr and exit 1."""
    from chatapp.commands.config import config_show

    raise typer.Exit(config_show())
