"""The typer application every `chatapp` command registers on."""

from __future__ import annotations

import typer
from typer.core import TyperGroup


class ChatByDefault(TyperGroup):
    """Bare `chatapp` is the chat, so options given before any command are the chat's:
    `chatapp --no-autotune` runs `chatapp chat --no-autotune` (`--help` stays the app's)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in self.get_help_option_names(ctx):
            args = ["chat", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="chatapp",
    cls=ChatByDefault,
    help="Run GGUF models locally in the terminal and see what they do. With no command, the "
    "chat opens, and takes the chat's options: `chatapp --no-autotune` (see `chatapp chat "
    "--help`).",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
    no_args_is_help=False,
)
history_app = typer.Typer(help="Saved conversations.", no_args_is_help=True)
config_app = typer.Typer(help="The config file.", no_args_is_help=True)
app.add_typer(history_app, name="history")
app.add_typer(config_app, name="config")
