"""`chatapp bench` and `chatapp tune`: how fast, measured here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from chatapp.cli.bench_modes import choose_mode
from chatapp.cli.bench_options import (
    DEFAULT_DEPTH,
    REPS,
    TOKENS,
    AlternativesOpt,
    BusyOpt,
    DepthOpt,
    EstimateOpt,
    LlamaBenchOpt,
    LlamaServerOpt,
    LoadOpt,
    RepsOpt,
    SizeOpt,
    TerminalOpt,
    TokensOpt,
    UiOpt,
)
from chatapp.cli.options import (
    CtxOpt,
    DraftOpt,
    FlashOpt,
    JsonOpt,
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
from chatapp.engine.protocol import LoadOptions
from chatapp.errors import UsageError


def _size(text: str) -> tuple[int, int]:
    cols, _, rows = text.lower().partition("x")
    if not (cols.isdigit() and rows.isdigit()) or int(cols) < 40 or int(rows) < 12:
        raise UsageError(f"--size takes COLUMNSxROWS, at least 40x12, e.g. 80x24 (got {text!r})")
    return int(cols), int(rows)


@app.command()
def bench(
    model: ModelOpt = None,
    tokens: TokensOpt = None,
    prompt_tokens: DepthOpt = None,
    reps: RepsOpt = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    ngl: NglOpt = None,
    llama_bench: LlamaBenchOpt = None,
    llama_server: LlamaServerOpt = None,
    as_json: JsonOpt = False,
    busy: BusyOpt = False,
    load: LoadOpt = None,
    ui: UiOpt = False,
    terminal: TerminalOpt = False,
    size: SizeOpt = None,
    flash_attn: FlashOpt = None,
    repack: RepackOpt = None,
    draft: DraftOpt = None,
    alternatives: AlternativesOpt = 1,
    estimate: EstimateOpt = None,
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
    _check_tools(llama_bench, llama_server, busy, load)
    options = _options(model, ctx, ngl, threads, flash_attn, repack, draft_model)
    asked, tokens, reps = tokens, tokens or TOKENS, reps or REPS
    if mode in (None, "--busy"):
        code = _speed(
            options, tokens, prompt_tokens, reps, llama_bench, llama_server, load, as_json, busy
        )
    else:
        chosen = (as_json, estimate, alternatives, kind, llama_server, screen)
        code = _mode(mode, options, (asked, tokens, reps), *chosen)
    raise typer.Exit(code)


def _options(model, ctx, ngl, threads, flash_attn, repack, draft_model) -> LoadOptions:
    """What bench loads: the options given, config.toml's for the rest."""
    return load_options(
        model,
        ctx=ctx,
        ngl=ngl,
        threads=threads,
        flash_attn=flash_attn,
        repack=repack,
        config=read_config(),
        draft_model=draft_model,
    )


def _check_tools(llama_bench: Path | None, llama_server: Path | None, busy: bool, load) -> None:
    """The reference programs and --busy's load, before any model loads."""
    check_tool("llama-bench", llama_bench)
    check_tool("llama-server", llama_server)
    if busy:
        check_load("spin" if load is None else load)


def _mode(mode, options, counts, as_json, estimate, alternatives, kind, llama_server, screen):
    """The exit code of one of bench's modes (bench_modes.MODES); `counts` are the tokens
    asked, the tokens and the repetitions."""
    asked, tokens, reps = counts
    if mode == "--estimate":
        from chatapp.commands.bench.estimate import print_estimate_bench

        files = [resolve_model(f) for f in estimate or ()]
        return print_estimate_bench(files, options, reps, as_json)
    if mode == "--alternatives":
        from chatapp.commands.bench.batch import print_batch_bench

        return print_batch_bench(options, alternatives, tokens, reps, as_json)
    if mode == "--draft":
        from chatapp.commands.bench.draft import print_draft_bench

        return print_draft_bench(options, kind, reps, as_json, llama_server, tokens=asked)
    if mode == "--terminal":
        from chatapp.ui.bench.terminal_bench import print_terminal_bench

        return print_terminal_bench(options, tokens, reps, as_json, screen)
    from chatapp.ui.bench.headless_bench import run_ui_bench  # (--busy is the speed run's)

    return run_ui_bench(options, tokens, reps, as_json)


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
