"""The typer application every `chatapp` command registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="chatapp",
    help="Run GGUF models locally in the terminal and see what they do.",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
    no_args_is_help=False,
)
history_app = typer.Typer(help="Saved conversations.", no_args_is_help=True)
config_app = typer.Typer(help="The config file.", no_args_is_help=True)
app.add_typer(history_app, name="history")
app.add_typer(config_app, name="config")
