"""`chatapp pull` and `chatapp search`: models from the Hugging Face Hub."""

from __future__ import annotations

from typing import Annotated

import typer

from chatapp.cli.options import CtxOpt, JsonOpt
from chatapp.cli.typer_app import app
from chatapp.commands.settings import read_config


@app.command()
def pull(
    specs: Annotated[
        list[str],
        typer.Argument(
            help="USER/REPO[:QUANT], hf.co/USER/REPO[:QUANT] or USER/REPO:FILE.gguf "
            "(no QUANT: Q4_K_M, else Q8_0, else the first file)"
        ),
    ],
    list_: Annotated[
        bool,
        typer.Option("--list", help="each GGUF file: size, fits here?, speed here (no download)"),
    ] = False,
    update: Annotated[
        bool, typer.Option("--update", help="download again if the file changed upstream")
    ] = False,
    calibrate: Annotated[
        bool, typer.Option("--calibrate", help="with --list: measure this machine's speed again")
    ] = False,
    ctx: CtxOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Download models into the Hugging Face cache (resumable, sha256-checked), or --list them."""
    from chatapp.commands.pull import list_cmd, pull_cmd

    if list_:
        if update:
            from chatapp.errors import UsageError

            raise UsageError("--list downloads nothing; it does not take --update")
        raise typer.Exit(list_cmd(specs, ctx or read_config().n_ctx, as_json, calibrate))
    raise typer.Exit(pull_cmd(specs, as_json, update))


@app.command()
def search(
    text: Annotated[str, typer.Argument(help="part of a model's name, e.g. qwen3 or llama-3.2")],
    limit: Annotated[int, typer.Option(min=1, max=100, help="at most this many repos")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """The Hub's GGUF repos for TEXT, most downloaded first."""
    from chatapp.commands.pull import search_cmd

    raise typer.Exit(search_cmd(text, limit, as_json))
