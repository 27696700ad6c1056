"""The `chatapp` command line (typer); the UI and llama.cpp are imported only inside commands."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from chatapp.commands.settings import (
    draft_choice,
    load_options,
    read_config,
    resolve_server,
    sampler_settings,
)
from chatapp.engine.protocol import LoadOptions
from chatapp.errors import ChatappError, UsageError
from chatapp.sampling import BOUNDS

app = typer.Typer(
    name="chatapp",
    help="Run GGUF models locally in the terminal and see what they do.",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
    no_args_is_help=False,
)

ModelOpt = Annotated[
    Path | None, typer.Option("--model", "-m", help="GGUF file (default: the bundled SmolLM2)")
]
# Options default to None ("not given"): load_options / sampler_settings fill them in from
# config.toml, else from LoadOptions' / SamplerSettings' own defaults.
CtxOpt = Annotated[
    int | None, typer.Option("--ctx", min=16, help="context size in tokens (default: config)")
]
NglOpt = Annotated[
    int | None,
    typer.Option("--ngl", min=-1, help="layers on the GPU (-1 = all; default: config)"),
]
ThreadsOpt = Annotated[
    int | None,
    typer.Option("--threads", min=1, help="CPU threads (default: config, else tuned, else all)"),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(help="OpenAI-compatible server: a URL, or a NAME from [servers.NAME]"),
]
ApiKeyEnvOpt = Annotated[
    str | None, typer.Option(help="environment variable holding the server's API key")
]
ModelNameOpt = Annotated[str | None, typer.Option(help="model name on the server")]
BatchOpt = Annotated[int | None, typer.Option("--batch", min=1, help="prompt batch size")]
FlashOpt = Annotated[
    bool | None,
    typer.Option(
        "--flash-attn/--no-flash-attn",
        help="flash attention (default: as tuned, else off on the CPU, auto on a GPU)",
    ),
]
ThinkOpt = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="thinking models: reasoning on or off where the chat template has the switch "
        "(default: config, else the template's own)",
    ),
]
RepackOpt = Annotated[
    bool | None,
    typer.Option(
        "--repack/--no-repack",
        help="llama.cpp's extra CPU buffers: AMX, weight repacking (default: on unless they "
        "crashed here)",
    ),
]


DraftOpt = Annotated[
    str | None,
    typer.Option(
        "--draft",
        help="speculative decoding: 'ngram' (drafts looked up in the prompt and reply), a smaller "
        "GGUF file with the same vocabulary (a draft model), or 'off' (default: config, else off)",
    ),
]


def _bound_help(name: str) -> str:
    b = BOUNDS[name]
    return f"{b.help} [{b.low:g}..{b.high:g}]"


@app.callback()
def root(ctx: typer.Context) -> None:
    """With no command, open the chat on the bundled model."""
    if ctx.invoked_subcommand is None:
        chat(
            model=None,
            ctx=None,
            ngl=None,
            threads=None,
            batch=None,
            flash_attn=None,
            repack=None,
            server=None,
            api_key_env=None,
            model_name=None,
            think=None,
            draft=None,
            vs=None,
        )


@app.command()
def chat(
    model: Annotated[
        Path | None, typer.Argument(help="GGUF file (default: config, else bundled)")
    ] = None,
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
    vs: Annotated[
        Path | None,
        typer.Option(
            "--vs", help="a second GGUF file: each prompt goes to both, side by side (greedy)"
        ),
    ] = None,
) -> None:
    """Open the chat TUI (settings not given here come from config.toml)."""
    from dataclasses import replace

    from chatapp.config import load_config

    config, problems = load_config()
    if think is not None:
        config = replace(config, think=think)
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    config = replace(config, draft=kind)
    options = load_options(
        model, ctx, ngl, threads, batch, flash_attn, repack, config, find_model=url is None,
        draft_model=draft_model,
    )  # fmt: skip
    if vs is not None:
        if url is not None:
            raise UsageError("--vs compares two local files; it does not take --server")
        from chatapp.ui.launch import run_versus_app

        run_versus_app(options, str(vs))
        return
    from chatapp.ui.launch import run_chat_app  # the UI is imported only here

    run_chat_app(options, server=url, remote=remote, config=config, problems=problems)


@app.command()
def ask(
    prompt: Annotated[str, typer.Argument(help="what to ask")],
    model: ModelOpt = None,
    system: Annotated[str | None, typer.Option(help="system prompt")] = None,
    max_tokens: Annotated[int | None, typer.Option(help=_bound_help("max_tokens"))] = None,
    temperature: Annotated[float | None, typer.Option(help=_bound_help("temperature"))] = None,
    top_p: Annotated[float | None, typer.Option(help=_bound_help("top_p"))] = None,
    top_k: Annotated[int | None, typer.Option(help=_bound_help("top_k"))] = None,
    min_p: Annotated[float | None, typer.Option(help=_bound_help("min_p"))] = None,
    repeat_penalty: Annotated[
        float | None, typer.Option(help=_bound_help("repeat_penalty"))
    ] = None,
    seed: Annotated[int | None, typer.Option(help=_bound_help("seed"))] = None,
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
) -> None:
    """Stream one reply to stdout, then a stats line to stderr (defaults from config.toml)."""
    from chatapp.commands.ask import run_ask

    config = read_config()
    settings = sampler_settings(
        config,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        repeat_penalty=repeat_penalty,
        max_tokens=max_tokens,
        seed=seed,
    )
    url, remote = resolve_server(server, api_key_env, model_name, config)
    kind, draft_model = draft_choice(draft, config)
    options = load_options(
        model, ctx, ngl, threads, None, flash_attn, repack, config, find_model=url is None,
        draft_model=draft_model,
    )  # fmt: skip
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
    )
    raise typer.Exit(code)


@app.command()
def tokenize(
    text: Annotated[str, typer.Argument(help="any text")],
    model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list on stdout")] = False,
    special: Annotated[bool, typer.Option(help="parse special tokens like <|im_start|>")] = True,
) -> None:
    """Print the tokens (id, piece) of any text."""
    from chatapp.commands.ask import run_tokenize

    options = LoadOptions(model_path=_model_path(model), n_ctx=512, n_gpu_layers=0)
    raise typer.Exit(run_tokenize(text, options, as_json, special))


@app.command()
def bench(
    model: ModelOpt = None,
    tokens: Annotated[int, typer.Option(min=8, help="tokens generated per run")] = 128,
    prompt_tokens: Annotated[
        int,
        typer.Option(
            "--depth",
            "--prompt-tokens",
            min=8,
            help="prompt tokens per run: decode runs after them",
        ),
    ] = 256,
    reps: Annotated[int, typer.Option(min=1, help="repetitions (alternating)")] = 3,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    ngl: NglOpt = None,
    llama_bench: Annotated[
        Path | None, typer.Option("--llama-bench", help="path of llama.cpp's llama-bench")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    ui: Annotated[bool, typer.Option("--ui", help="stream through the real TUI, headless")] = False,
    terminal: Annotated[
        bool,
        typer.Option(
            "--terminal", help="the real TUI under tmux vs `chatapp ask`, same greedy reply"
        ),
    ] = False,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    draft: DraftOpt = None,
    alternatives: Annotated[
        int,
        typer.Option(
            "--alternatives", min=1, max=8, help="N replies in one batch vs one reply (2..8)"
        ),
    ] = 1,
) -> None:
    """Decode and prefill speed of the engine vs llama-cpp-python (and llama-bench)."""
    kind, draft_model = draft_choice(draft or "off")
    options = load_options(
        model, ctx, ngl, threads, None, flash_attn, repack, read_config(), draft_model=draft_model
    )
    if alternatives > 1:
        from chatapp.commands.batch_bench import print_batch_bench

        raise typer.Exit(print_batch_bench(options, alternatives, tokens, reps, as_json))
    if kind:
        from chatapp.commands.draft_bench import print_draft_bench

        raise typer.Exit(print_draft_bench(options, kind, tokens, reps, as_json))
    if prompt_tokens + tokens > options.n_ctx:
        raise UsageError(
            f"--depth {prompt_tokens} + --tokens {tokens} do not fit in a context of "
            f"{options.n_ctx} tokens: give a larger --ctx (or n_ctx in config.toml)"
        )
    if terminal:
        from chatapp.ui.terminal_bench import print_terminal_bench

        raise typer.Exit(print_terminal_bench(options, tokens, reps, as_json))
    if ui:
        from chatapp.ui.bench import run_ui_bench

        raise typer.Exit(run_ui_bench(options, tokens, reps, as_json))
    from chatapp.commands.bench import run_bench

    raise typer.Exit(
        run_bench(
            options,
            tokens=tokens,
            prompt_tokens=prompt_tokens,
            reps=reps,
            llama_bench=llama_bench,
            as_json=as_json,
        )
    )


@app.command()
def tune(
    model: Annotated[Path | None, typer.Argument(help="GGUF file (default: bundled)")] = None,
    ctx: Annotated[
        int | None, typer.Option("--ctx", min=64, help="context size in tokens (default: config)")
    ] = None,
    ngl: NglOpt = None,
    tokens: Annotated[int, typer.Option(min=4, help="tokens decoded at each depth")] = 32,
    depth: Annotated[
        list[int] | None,
        typer.Option(help="depths to decode at (repeatable; default 0, 512, 2048)", min=0),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
) -> None:
    """Measure threads x flash attention x repack here; save the best for this file."""
    from chatapp.commands.tune import run_tune

    options = load_options(model, ctx, ngl, config=read_config())
    raise typer.Exit(run_tune(options, tokens, tuple(depth or (0, 512, 2048)), as_json))


# ---- models: inspect, fit, discovery, quantize, compare ------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout")]


@app.command("inspect")
def inspect_model(
    model: Annotated[Path, typer.Argument(help="GGUF file")],
    ctx: CtxOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a GGUF file's model card (read from its header) and its memory needs."""
    from chatapp.commands.models import inspect_cmd

    options = load_options(model, ctx, config=read_config(), find_model=False)
    raise typer.Exit(inspect_cmd(model, options.n_ctx, as_json))


@app.command()
def fit(
    model: Annotated[Path | None, typer.Argument(help="GGUF file (default: bundled)")] = None,
    ctx: CtxOpt = None,
    ngl: NglOpt = None,
    params: Annotated[
        float | None,
        typer.Option("--params", help="what-if: a model of this many billion parameters"),
    ] = None,
    memory: Annotated[
        float | None,
        typer.Option("--memory", help="GiB to fit (default: free GPU memory, else free RAM)"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Will a model fit here (weights + KV cache + compute buffer)? Or a what-if table."""
    from chatapp.commands.models import fit_cmd

    options = load_options(model, ctx, ngl, config=read_config(), find_model=False)
    raise typer.Exit(fit_cmd(model, options.n_ctx, options.n_gpu_layers, params, memory, as_json))


@app.command()
def models(
    dirs: Annotated[
        list[Path] | None, typer.Option("--dir", help="folder to search (repeatable)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List GGUF files: the bundled ones, the cache, the given folders and config's model_dirs."""
    from chatapp.commands.models import models_cmd

    config = read_config()
    raise typer.Exit(models_cmd(dirs or [], as_json, config_dirs=config.model_dirs))


@app.command()
def quantize(
    src: Annotated[Path, typer.Argument(help="GGUF file to quantize")],
    types: Annotated[
        list[str], typer.Option("--type", "-t", help="target, e.g. Q8_0 or Q4_K_M (repeatable)")
    ],
    out: Annotated[Path | None, typer.Option("--out", help="folder (default: the cache)")] = None,
) -> None:
    """Write quantized copies of a GGUF file with llama.cpp (in a child process)."""
    from chatapp.commands.models import quantize_cmd

    raise typer.Exit(quantize_cmd(src, types, out))


@app.command()
def compare(
    files: Annotated[
        list[Path], typer.Argument(help="GGUF files, e.g. quantizations of one model")
    ],
    prompt: Annotated[str | None, typer.Option(help="prompt of the speed run")] = None,
    tokens: Annotated[int, typer.Option(min=2, help="tokens generated greedily per file")] = 64,
    reference: Annotated[
        Path | None, typer.Option(help="reference for quality (default: the largest file)")
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
        None, None, ngl, threads, None, flash_attn, repack, read_config(), find_model=False
    )
    raise typer.Exit(
        compare_cmd(files, prompt, tokens, reference, fmt, options=options, text=text, text_ctx=ctx)
    )


# ---- history and config sub-commands -------------------------------------------------------

history_app = typer.Typer(help="Saved conversations.", no_args_is_help=True)
config_app = typer.Typer(help="The config file.", no_args_is_help=True)
app.add_typer(history_app, name="history")
app.add_typer(config_app, name="config")


class ExportFormat(StrEnum):
    """Formats of `history export`."""

    md = "md"
    json = "json"


ConversationId = Annotated[int, typer.Argument(help="conversation id (see `history list`)")]


@history_app.command("list")
def history_list_command(
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="show at most this many")] = None,
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
    from chatapp.commands.history import config_path

    raise typer.Exit(config_path())


@config_app.command("show")
def config_show_command() -> None:
    """Print the effective config as TOML; problems go to stderr and exit 1."""
    from chatapp.commands.history import config_show

    raise typer.Exit(config_show())


def _model_path(model: Path | None) -> str:
    from chatapp.commands.ask import resolve_model

    return resolve_model(model)


try:  # typer >= 0.20 vendors click as typer._click and raises its exceptions
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # older typer raises click's own (NoArgsIsHelpError: click >= 8.2)
    from click.exceptions import ClickException, NoArgsIsHelpError

# typer.Abort (Ctrl-C at a prompt) is typer's own class since typer vendors click, click's
# re-exported before; typer.TyperException is the base of the vendored click exceptions.
_CLI_ERRORS = (typer.TyperException, ClickException)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user error is one `error:` line and a non-zero exit (2 for
    bad flags, 1 for the rest), never a traceback."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="chatapp", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # `chatapp history`: the help is the answer
        print(exc.ctx.get_help())
        code = 0
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        code = 130
    except _CLI_ERRORS as exc:  # click's usage errors: bad flags, a missing argument
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"error: {message}", file=sys.stderr)
        code = getattr(exc, "exit_code", 2) or 2
    except ChatappError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
