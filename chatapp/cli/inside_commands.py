"""`chatapp inside`: a look inside the model at the token after a prompt, or a text's surprise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.checks import some_text
from chatapp.cli.options import CtxOpt, JsonOpt, ModelOpt, ThinkOpt, ThreadsOpt
from chatapp.cli.typer_app import app
from chatapp.commands.settings import load_options, read_config
from chatapp.errors import UsageError


@app.command()
def inside(
    prompt: Annotated[
        str | None,
        typer.Argument(help="the prompt whose next token is looked at", callback=some_text),
    ] = None,
    model: ModelOpt = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="plain text completion: no chat template")
    ] = False,
    system: Annotated[str | None, typer.Option(help="system prompt")] = None,
    heads: Annotated[bool, typer.Option("--heads", help="attention of each head too")] = False,
    layer: Annotated[
        int | None,
        typer.Option("--layer", min=1, help="attention of this layer only (default: all)"),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=1, max=50, help="tokens listed per depth of the lens")
    ] = 3,
    text: Annotated[
        Path | None,
        typer.Option(
            "--text",
            help="instead: colour each token of this text file by the probability the model "
            "gave it, with the text's perplexity",
        ),
    ] = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    think: ThinkOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Inside the model: each layer's prediction, attention, and embedding neighbours.

    For the token after PROMPT: what each layer would predict (the logit lens), what the last
    token attended to, and the nearest tokens to the answer in the embedding space."""
    from chatapp.commands import inside as cmd

    if (prompt is None) == (text is None):
        raise UsageError("give a PROMPT, or --text FILE (one of the two)")
    config = read_config()
    options = load_options(model, ctx=ctx, threads=threads, config=config)
    if prompt is None:  # then --text
        raise typer.Exit(cmd.run_surprise(str(text), options, as_json=as_json))
    code = cmd.run_inside(
        prompt,
        options,
        raw=raw,
        as_json=as_json,
        heads=heads,
        layer=layer,
        system=system,
        think=config.think if think is None else think,
        top=top,
    )
    raise typer.Exit(code)
