"""`chatapp steer`: make concept vectors, list them, meter a text (steer a reply: ask --steer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.checks import some_text
from chatapp.cli.options import CtxOpt, JsonOpt, ModelOpt, ThreadsOpt
from chatapp.cli.typer_app import app
from chatapp.commands.settings import load_options, read_config, resolve_model

steer_app = typer.Typer(
    help="Concept vectors (llama.cpp control vectors): make, list, meter. Apply one with "
    "`chatapp ask --steer NAME:STRENGTH`.",
    no_args_is_help=True,
)
app.add_typer(steer_app, name="steer")


@steer_app.command("make")
def make(
    name: Annotated[
        str, typer.Argument(help="the vector's name (a built-in pair's needs no files)")
    ],
    positive: Annotated[Path | None, typer.Option(help="texts of the concept, one a line")] = None,
    negative: Annotated[Path | None, typer.Option(help="texts of its opposite, one a line")] = None,
    method: Annotated[
        str, typer.Option(help="mean (difference of the means) or pca (of the paired differences)")
    ] = "mean",
    at: Annotated[
        str,
        typer.Option(help="read each text's stream as the mean over its tokens, or at the last"),
    ] = "mean",
    replace: Annotated[bool, typer.Option("--replace", help="make a kept vector again")] = False,
    model: ModelOpt = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a vector from examples and keep it for the model (llama.cpp's control-vector GGUF)."""
    from chatapp.commands.steer import run_make

    options = load_options(model, ctx=ctx, threads=threads, config=read_config())
    code = run_make(
        name, options, positive=positive, negative=negative, method=method, at=at,
        replace=replace, as_json=as_json,
    )  # fmt: skip
    raise typer.Exit(code)


@steer_app.command("list")
def list_vectors(model: ModelOpt = None, as_json: JsonOpt = False) -> None:
    """The vectors kept for the model, and the built-in pairs not made for it yet."""
    from chatapp.commands.steer import run_list

    config = read_config()
    raise typer.Exit(run_list(resolve_model(model or config.default_model or None), as_json))


@steer_app.command("meter")
def meter(
    name: Annotated[str, typer.Argument(help="a kept vector's name, or a .gguf file")],
    text: Annotated[str, typer.Argument(help="the text to measure", callback=some_text)],
    layer: Annotated[
        int | None, typer.Option(min=1, help="the layer shown per token (default: the middle)")
    ] = None,
    model: ModelOpt = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Each token's projection on the vector at every layer: where the concept lights up."""
    from chatapp.commands.steer import run_meter

    options = load_options(model, ctx=ctx, threads=threads, config=read_config())
    raise typer.Exit(run_meter(name, text, options, layer=layer, as_json=as_json))
