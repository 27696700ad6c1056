"""`chatapp` (no command), `chat`, `ask` and `tokenize`: talking to a model."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from chatapp.cli.chat_options import (
    AskJsonOpt,
    AutotuneOpt,
    FileOpt,
    GrammarOpt,
    JsonSchemaOpt,
    PromptArg,
    RawOpt,
    StopOpt,
    SystemOpt,
    VsOpt,
)
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

if TYPE_CHECKING:
    from chatapp.config import Config


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
    system: SystemOpt = None,
    autotune: AutotuneOpt = None,
    vs: VsOpt = None,
    steer: SteerOpt = None,
    steer_layers: SteerLayersOpt = None,
    lesson_step: Annotated[int | None, typer.Option(hidden=True)] = None,
) -> None:
    """Open the chat TUI (settings not given here come from config.toml)."""
    config, problems = _chat_config(threads, system, think, autotune)
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    config = replace(config, draft=kind)
    if vs is not None and url is not None:
        raise UsageError("--vs compares two local files; it does not take --server")
    loading = (ctx, ngl, threads, flash_attn, repack)
    options = _load_options(model, config, url, draft_model, *loading, batch=batch)
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
        lesson_step=lesson_step,
    )


def _chat_config(threads, system, think, autotune) -> tuple[Config, list[str]]:
    """config.toml with chat's --system, --think and --autotune over it, and the notes for the
    TUI's start (config's problems, --threads' warning)."""
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
    return config, problems


def _load_options(
    model, config, url, draft_model, ctx, ngl, threads, flash_attn, repack, batch=None
) -> LoadOptions:
    """The model `chat` and `ask` load: the options given, config.toml's for the rest (with a
    server, the model is the server's name for it)."""
    return load_options(
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


@app.command()
@sampler_options
def ask(
    prompt: PromptArg,
    model: ModelOpt = None,
    system: SystemOpt = None,
    samplers: dict | None = None,  # (sampler_options: --temperature, --top-k, ...)
    stop: StopOpt = None,
    ctx: CtxOpt = None,
    ngl: NglOpt = None,
    threads: ThreadsOpt = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    think: ThinkOpt = None,
    draft: DraftOpt = None,
    as_json: AskJsonOpt = False,
    server: ServerOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    model_name: ModelNameOpt = None,
    json_schema: JsonSchemaOpt = None,
    grammar: GrammarOpt = None,
    file: FileOpt = None,
    steer: SteerOpt = None,
    steer_layers: SteerLayersOpt = None,
    raw: RawOpt = False,
) -> None:
    """Stream one reply to stdout, then a stats line to stderr (defaults from config.toml)."""
    from chatapp.chat.prompts import resolve_system
    from chatapp.commands.ask import grammar_option, run_ask

    constraint = grammar_option(json_schema, grammar)
    config = read_config()
    system = resolve_system(system, config)
    settings = sampler_settings(config, **(samplers or {}))
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    loading = (ctx, ngl, threads, flash_attn, repack)
    options = _load_options(model, config, url, draft_model, *loading)
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
