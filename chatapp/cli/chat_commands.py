"""`chatapp` (no command), `chat`, `ask` and `tokenize`: talking to a model."""

from __future__ import annotations

from typing import Annotated

import typer

from chatapp.cli.checks import some_file, some_text
from chatapp.cli.options import (
    ApiKeyEnvOpt,
    BatchOpt,
    CtxOpt,
    DraftOpt,
    FlashOpt,
    ModelArg,
    ModelNameOpt,
    ModelOpt,
    NglOpt,
    RepackOpt,
    ServerOpt,
    SteerLayersOpt,
    SteerOpt,
    ThinkOpt,
    ThreadsOpt,
    sampler_options,
    threads_notes,
)
from chatapp.cli.typer_app import app
from chatapp.commands.settings import (
    draft_choice,
    load_options,
    read_config,
    resolve_model,
    resolve_server,
    sampler_settings,
)
from chatapp.engine.protocol import LoadOptions
from chatapp.errors import UsageError


@app.callback()
def root(ctx: typer.Context) -> None:
    """With no command, open the chat on the bundled model."""
    if ctx.invoked_subcommand is None:
        chat()


@app.command()
def chat(
    model: ModelArg = None,
    ctx: CtxOpt = None,
    ngl: NglOpt = None,
    threads: ThreadsOpt = None,
    batch: BatchOpt = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    server: ServerOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    model_name: ModelNameOpt = None,
    think: ThinkOpt = None,
    draft: DraftOpt = None,
    system: Annotated[
        str | None, typer.Option(help="system prompt: text, or @NAME for a named one")
    ] = None,
    autotune: Annotated[
        bool | None,
        typer.Option(
            "--autotune/--no-autotune",
            help="tune on first use: measure flash attention and threads for a file with no "
            "saved tune, while you type (default: config, else on)",
        ),
    ] = None,
    vs: Annotated[
        str | None,
        typer.Option(
            "--vs",
            help="a second GGUF file or name: each prompt goes to both, side by side (greedy)",
        ),
    ] = None,
    steer: SteerOpt = None,
    steer_layers: SteerLayersOpt = None,
) -> None:
    """Open the chat TUI (settings not given here come from config.toml)."""
    from dataclasses import replace

    from chatapp.config import load_config

    config, problems = load_config()
    problems += threads_notes(threads)
    if system is not None:
        from chatapp.chat.prompts import resolve_system

        config = replace(config, system_prompt=resolve_system(system, config) or "")
    if think is not None:
        config = replace(config, think=think)
    if autotune is not None:
        config = replace(config, autotune=autotune)
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    config = replace(config, draft=kind)
    if vs is not None and url is not None:
        raise UsageError("--vs compares two local files; it does not take --server")
    options = load_options(
        model,
        ctx=ctx,
        ngl=ngl,
        threads=threads,
        batch=batch,
        flash_attn=flash_attn,
        repack=repack,
        config=config,
        find_model=url is None,
        draft_model=draft_model,
    )
    if vs is not None and steer:
        raise UsageError("--vs compares two models as they are; it does not take --steer")
    steering = steering_option(steer, steer_layers, options, url)
    if vs is not None:
        from chatapp.ui.launch import run_versus_app

        run_versus_app(options, resolve_model(vs), config=config, problems=problems)
        return
    from chatapp.ui.launch import run_chat_app  # the UI is imported only here

    # F10's comparison loads each file as `chatapp compare` would with these flags.
    compare_options = load_options(
        None,
        ngl=ngl,
        threads=threads,
        flash_attn=flash_attn,
        repack=repack,
        config=config,
        find_model=False,
    )
    run_chat_app(
        options,
        server=url,
        remote=remote,
        config=config,
        problems=problems,
        compare_options=compare_options,
        steering=steering,
    )


@app.command()
@sampler_options
def ask(
    prompt: Annotated[str, typer.Argument(help="what to ask", callback=some_text)],
    model: ModelOpt = None,
    system: Annotated[
        str | None, typer.Option(help="system prompt: text, or @NAME for a named one")
    ] = None,
    samplers: dict | None = None,  # (sampler_options: --temperature, --top-k, ...)
    stop: Annotated[list[str] | None, typer.Option(help="stop string (repeatable)")] = None,
    ctx: CtxOpt = None,
    ngl: NglOpt = None,
    threads: ThreadsOpt = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    think: ThinkOpt = None,
    draft: DraftOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
    server: ServerOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    model_name: ModelNameOpt = None,
    json_schema: Annotated[
        str | None, typer.Option(help="a JSON schema file: the reply is JSON that follows it")
    ] = None,
    grammar: Annotated[
        str | None,
        typer.Option(
            help="a GBNF grammar file (llama.cpp's): the reply follows it", callback=some_file
        ),
    ] = None,
    file: Annotated[
        list[str] | None,
        typer.Option(
            "--file", help="attach a text file (repeatable; - reads stdin)", callback=some_file
        ),
    ] = None,
    steer: SteerOpt = None,
    steer_layers: SteerLayersOpt = None,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="the prompt as is, without the chat template (base models)"),
    ] = False,
) -> None:
    """Stream one reply to stdout, then a stats line to stderr (defaults from config.toml)."""
    from chatapp.commands.ask import grammar_option, run_ask

    constraint = grammar_option(json_schema, grammar)

    config = read_config()
    from chatapp.chat.prompts import resolve_system

    system = resolve_system(system, config)
    settings = sampler_settings(config, **(samplers or {}))
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    options = load_options(
        model,
        ctx=ctx,
        ngl=ngl,
        threads=threads,
        flash_attn=flash_attn,
        repack=repack,
        config=config,
        find_model=url is None,
        draft_model=draft_model,
    )
    code = run_ask(
        prompt,
        options,
        settings,
        system=system,
        stop=stop or [],
        as_json=as_json,
        server=url,
        remote=remote if url else None,
        think=config.think if think is None else think,
        draft=kind,
        grammar=constraint,
        files=file or [],
        steer=steer_specs(steer, steer_layers, url),
        raw=raw,
    )
    raise typer.Exit(code)


def steer_specs(steer: list[str] | None, layers: str | None, server: str | None):
    """--steer NAME:STRENGTH ... and --steer-layers as ([(name, strength)], (start, end)), or
    None when not given; a sentence (SteeringError) for bad ones or for a server."""
    from chatapp.engine.steer_checks import parse_layers, parse_steer
    from chatapp.engine.steering import REMOTE_NOTE, SteeringUnavailable

    if not steer:
        if layers is not None:
            raise UsageError("--steer-layers goes with --steer NAME:STRENGTH")
        return None
    if server is not None:
        raise SteeringUnavailable(REMOTE_NOTE)
    return [parse_steer(s) for s in steer], parse_layers(layers) if layers else (0, 0)


def steering_option(steer, layers, options, server: str | None):
    """The Steering `chat --steer` asks for (kept vectors, .gguf files, built-in pairs: one
    not made for the model yet is made first), or None."""
    specs = steer_specs(steer, layers, server)
    if specs is None:
        return None
    from chatapp.commands.steer import chat_steering

    return chat_steering(options, specs)


@app.command()
def tokenize(
    text: Annotated[str, typer.Argument(help="any text")],
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list on stdout")] = False,
    special: Annotated[bool, typer.Option(help="parse special tokens like <|im_start|>")] = True,
) -> None:
    """Print the tokens (id, piece) of any text."""
    from chatapp.commands.ask import run_tokenize

    options = LoadOptions(model_path=resolve_model(model), n_ctx=512, n_gpu_layers=0)
    raise typer.Exit(run_tokenize(text, options, as_json, special))
