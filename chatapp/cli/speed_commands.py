"""`chatapp bench` and `chatapp tune`: how fast, measured here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.bench_modes import choose_mode
from chatapp.cli.options import (
    CtxOpt,
    DraftOpt,
    FlashOpt,
    ModelArg,
    ModelOpt,
    NglOpt,
    RepackOpt,
    ThreadsOpt,
)
from chatapp.cli.typer_app import app
from chatapp.commands.bench.loads import check_load
from chatapp.commands.bench.reference_tools import check_tool
from chatapp.commands.settings import draft_choice, load_options, read_config, resolve_model
from chatapp.errors import UsageError

DEFAULT_DEPTH = 256
TOKENS = 128
REPS = 3


def _size(text: str) -> tuple[int, int]:
    cols, _, rows = text.lower().partition("x")
    if not (cols.isdigit() and rows.isdigit()) or int(cols) < 40 or int(rows) < 12:
        raise UsageError(f"--size takes COLUMNSxROWS, at least 40x12, e.g. 80x24 (got {text!r})")
    return int(cols), int(rows)


@app.command()
def bench(
    model: ModelOpt = None,
    tokens: Annotated[
        int | None,
        typer.Option(min=8, max=32768, help=f"tokens generated per run (default {TOKENS})"),
    ] = None,
    prompt_tokens: Annotated[
        int | None,
        typer.Option(
            "--depth",
            "--prompt-tokens",
            min=8,
            max=4194304,
            help=f"prompt tokens per run: decode runs after them (default {DEFAULT_DEPTH})",
        ),
    ] = None,
    reps: Annotated[
        int | None,
        typer.Option(min=1, max=1000, help=f"repetitions, alternating (default {REPS})"),
    ] = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    ngl: NglOpt = None,
    llama_bench: Annotated[
        Path | None, typer.Option("--llama-bench", help="path of llama.cpp's llama-bench")
    ] = None,
    llama_server: Annotated[
        Path | None,
        typer.Option(
            "--llama-server",
            help="path of llama.cpp's llama-server: streams the same reply with top-10 "
            "log-probabilities (the peer doing the token loop's work); with --busy, one more arm "
            "under each load (on its own thread count); with --draft, its plain "
            "decode and its n-gram modes on the same greedy chats (a fresh server for each "
            "n-gram reply: those modes remember earlier replies)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    busy: Annotated[
        bool,
        typer.Option(
            "--busy",
            help="with programs of its own (--load) on 1, N-1 and N of N cores: the engine vs "
            "llama-bench at each fixed thread count, and when the thread count switched",
        ),
    ] = False,
    load: Annotated[
        str | None,
        typer.Option(
            "--load",
            help="with --busy, what those programs do: spin (a busy loop, the default), build "
            "(a generated C file compiled in a loop with cc), memory (streaming through a "
            "large buffer)",
        ),
    ] = None,
    ui: Annotated[bool, typer.Option("--ui", help="stream through the real TUI, headless")] = False,
    terminal: Annotated[
        bool,
        typer.Option(
            "--terminal", help="the real TUI under tmux vs `chatapp ask`, same greedy reply"
        ),
    ] = False,
    size: Annotated[
        str | None,
        typer.Option(
            "--size", help="with --terminal: the terminal's COLUMNSxROWS (default 160x45)"
        ),
    ] = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    draft: DraftOpt = None,
    alternatives: Annotated[
        int,
        typer.Option(
            "--alternatives", min=1, max=8, help="N replies in one batch vs one reply (2..8)"
        ),
    ] = 1,
    estimate: Annotated[
        list[str] | None,
        typer.Option(
            "--estimate",
            help="a GGUF file or name (repeatable): `pull --list`'s expected speed vs real decode",
        ),
    ] = None,
) -> None:
    """Decode and prefill speed of the engine vs llama-cpp-python (and llama-bench)."""
    kind, draft_model = draft_choice(draft or "off")
    given = {
        "--model": model, "--tokens": tokens, "--depth": prompt_tokens, "--reps": reps,
        "--ctx": ctx, "--threads": threads, "--ngl": ngl, "--llama-bench": llama_bench,
        "--llama-server": llama_server, "--json": as_json or None, "--load": load,
        "--size": size, "--flash-attn": flash_attn, "--repack": repack,
    }  # fmt: skip
    modes = {
        "--estimate": bool(estimate), "--alternatives": alternatives > 1, "--draft": bool(kind),
        "--terminal": terminal, "--ui": ui, "--busy": busy,
    }  # fmt: skip
    mode = choose_mode(modes, {flag for flag, value in given.items() if value is not None})
    screen = _size("160x45" if size is None else size)
    check_tool("llama-bench", llama_bench)  # (before any model loads)
    check_tool("llama-server", llama_server)
    if busy:
        check_load("spin" if load is None else load)
    options = load_options(
        model,
        ctx=ctx,
        ngl=ngl,
        threads=threads,
        flash_attn=flash_attn,
        repack=repack,
        config=read_config(),
        draft_model=draft_model,
    )
    asked, tokens, reps = tokens, tokens or TOKENS, reps or REPS
    if mode == "--estimate":
        from chatapp.commands.bench.estimate import print_estimate_bench

        files = [resolve_model(f) for f in estimate or ()]
        raise typer.Exit(print_estimate_bench(files, options, reps, as_json))
    if mode == "--alternatives":
        from chatapp.commands.bench.batch import print_batch_bench

        raise typer.Exit(print_batch_bench(options, alternatives, tokens, reps, as_json))
    if mode == "--draft":
        from chatapp.commands.bench.draft import print_draft_bench

        raise typer.Exit(
            print_draft_bench(options, kind, reps, as_json, llama_server, tokens=asked)
        )
    if mode == "--terminal":
        from chatapp.ui.bench.terminal_bench import print_terminal_bench

        raise typer.Exit(print_terminal_bench(options, tokens, reps, as_json, screen))
    if mode == "--ui":
        from chatapp.ui.bench.headless_bench import run_ui_bench

        raise typer.Exit(run_ui_bench(options, tokens, reps, as_json))
    raise typer.Exit(
        _speed(options, tokens, prompt_tokens, reps, llama_bench, llama_server, load, as_json, busy)
    )


def _speed(options, tokens, prompt_tokens, reps, llama_bench, llama_server, load, as_json, busy):
    """The engine's own runs at a depth: beside a load (--busy), or against its peers."""
    depth = DEFAULT_DEPTH if prompt_tokens is None else prompt_tokens
    if depth + tokens > options.n_ctx:
        raise UsageError(
            f"--depth {depth} + --tokens {tokens} do not fit in a context of "
            f"{options.n_ctx} tokens: give a larger --ctx (or n_ctx in config.toml)"
        )
    if busy:
        return _busy(options, tokens, depth, reps, llama_bench, llama_server, load, as_json)
    from chatapp.commands.bench.speed import run_bench

    return run_bench(
        options,
        tokens=tokens,
        prompt_tokens=depth,
        reps=reps,
        llama_bench=llama_bench,
        as_json=as_json,
        llama_server=llama_server,
    )


def _busy(options, tokens, depth, reps, llama_bench, llama_server, load, as_json) -> int:
    """--busy: the engine following the machine, so a thread count from config.toml (which
    pins it) is left out here, with a note."""
    from dataclasses import replace

    from chatapp.commands.bench.busy import print_busy_bench

    if options.n_threads is not None:
        print(
            f"note: config.toml's threads = {options.n_threads} pins the thread count; --busy "
            "measures the engine choosing it, so it is left out here",
            file=sys.stderr,
        )
        options = replace(options, n_threads=None)
    return print_busy_bench(
        options,
        tokens,
        depth,
        reps,
        llama_bench,
        llama_server,
        "spin" if load is None else load,
        as_json,
    )


@app.command()
def tune(
    model: ModelArg = None,
    ctx: Annotated[
        int | None, typer.Option("--ctx", min=64, help="context size in tokens (default: config)")
    ] = None,
    ngl: NglOpt = None,
    tokens: Annotated[
        int, typer.Option(min=4, max=32768, help="tokens decoded at each depth")
    ] = 32,
    depth: Annotated[
        list[int] | None,
        typer.Option(
            help="depths to decode at (repeatable; default 0, 512, 2048)", min=0, max=4194304
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
) -> None:
    """Measure threads x flash attention x repack here; save the best for this file."""
    from chatapp.commands.tune import run_tune

    options = load_options(model, ctx=ctx, ngl=ngl, config=read_config())
    raise typer.Exit(run_tune(options, tokens, tuple(depth or (0, 512, 2048)), as_json))
