"""`chatapp inspect`, `fit`, `models`, `quantize`, `compare`: GGUF files, alone and side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.checks import some_text
from chatapp.cli.options import (
    MODEL_HELP,
    CtxOpt,
    FlashOpt,
    JsonOpt,
    ModelArg,
    NglOpt,
    RepackOpt,
    ThreadsOpt,
    within,
)
from chatapp.cli.typer_app import app
from chatapp.commands.settings import load_options, read_config, resolve_model
from chatapp.errors import UsageError
from chatapp.models.fit import WHAT_IF_MEMORY_GIB, WHAT_IF_PARAMS_B


@app.command("inspect")
def inspect_model(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    ctx: CtxOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a GGUF file's model card (read from its header) and its memory needs."""
    from chatapp.commands.models import inspect_cmd

    path = resolve_model(model)
    options = load_options(path, ctx=ctx, config=read_config(), find_model=False)
    raise typer.Exit(inspect_cmd(path, options.n_ctx, as_json))


@app.command()
def fit(
    model: ModelArg = None,
    ctx: CtxOpt = None,
    ngl: NglOpt = None,
    params: Annotated[
        float | None,
        typer.Option(
            "--params",
            help="what-if: a model of this many billion parameters (0.01 to 2000)",
            callback=within(*WHAT_IF_PARAMS_B, "billions"),
        ),
    ] = None,
    memory: Annotated[
        float | None,
        typer.Option(
            "--memory",
            help="GiB to fit (default: free GPU memory, else free RAM; 0.01 to 100000)",
            callback=within(*WHAT_IF_MEMORY_GIB, "GiB"),
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Will a model fit here (weights + KV cache + compute buffer)? Or a what-if table."""
    from chatapp.commands.models import fit_cmd

    path = None if model is None and params is not None else resolve_model(model)
    options = load_options(path, ctx=ctx, ngl=ngl, config=read_config(), find_model=False)
    raise typer.Exit(fit_cmd(path, options.n_ctx, options.n_gpu_layers, params, memory, as_json))


@app.command()
def models(
    dirs: Annotated[
        list[Path] | None, typer.Option("--dir", help="folder to search (repeatable)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List GGUF files here, other tools' models included, with the name -m takes.

    Bundled, chatapp's cache, config's model_dirs, the given folders, the Hugging Face cache,
    Ollama, LM Studio and llama.cpp's cache."""
    from chatapp.commands.models import models_cmd

    config = read_config()
    raise typer.Exit(models_cmd(dirs or [], as_json, config_dirs=config.model_dirs))


@app.command()
def quantize(
    src: Annotated[str, typer.Argument(help=f"the model to quantize: {MODEL_HELP}")],
    types: Annotated[
        list[str], typer.Option("--type", "-t", help="target, e.g. Q8_0 or Q4_K_M (repeatable)")
    ],
    out: Annotated[Path | None, typer.Option("--out", help="folder (default: the cache)")] = None,
) -> None:
    """Write quantized copies of a GGUF file with llama.cpp (in a child process)."""
    from chatapp.commands.models import quantize_cmd

    raise typer.Exit(quantize_cmd(Path(resolve_model(src)), types, out))


@app.command()
def compare(
    files: Annotated[
        list[str], typer.Argument(help="GGUF files or names, e.g. quantizations of one model")
    ],
    prompt: Annotated[
        str | None, typer.Option(help="prompt of the speed run", callback=some_text)
    ] = None,
    tokens: Annotated[int, typer.Option(min=2, help="tokens generated greedily per file")] = 64,
    reference: Annotated[
        str | None, typer.Option(help="reference for quality (default: the largest file)")
    ] = None,
    threads: ThreadsOpt = None,
    ngl: NglOpt = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="a Markdown table")] = False,
    text: Annotated[
        Path | None,
        typer.Option(help="score quality on this text file, as llama-perplexity does"),
    ] = None,
    ctx: Annotated[
        int, typer.Option(min=8, help="with --text: tokens per chunk (llama-perplexity -c)")
    ] = 512,
) -> None:
    """Size, load time, peak memory, TTFT, speed, and quality (top-1, KL, perplexity)."""
    from chatapp.commands.models import compare_cmd

    if as_json + as_csv + markdown > 1:
        raise UsageError("choose one of --json, --csv and --markdown")
    fmt = "json" if as_json else "csv" if as_csv else "markdown" if markdown else "table"
    options = load_options(
        None,
        ngl=ngl,
        threads=threads,
        flash_attn=flash_attn,
        repack=repack,
        config=read_config(),
        find_model=False,
    )
    paths = [Path(resolve_model(f)) for f in files]
    ref = Path(resolve_model(reference)) if reference else None
    raise typer.Exit(
        compare_cmd(paths, prompt, tokens, ref, fmt, options=options, text=text, text_ctx=ctx)
    )
