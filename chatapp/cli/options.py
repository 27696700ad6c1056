"""The options several commands share, as typer annotations (None = not given: config fills it)."""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from chatapp.config import CTX_RANGE, GPU_LAYERS_RANGE
from chatapp.cpus import ThreadCountError, check_threads
from chatapp.engine.steer_checks import STRENGTH_LIMIT
from chatapp.sampling import SAMPLERS, SLIDERS

MODEL_HELP = (
    "a GGUF file, or a name: USER/REPO[:QUANT] or USER/REPO:FILE.gguf (Hugging Face, pulled "
    "when not on disk), ollama:NAME[:TAG]"
)
ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help=f"{MODEL_HELP} (default: the bundled SmolLM2)")
]
ModelArg = Annotated[
    str | None, typer.Argument(help=f"{MODEL_HELP} (default: config, else the bundled SmolLM2)")
]
CtxOpt = Annotated[
    int | None,
    typer.Option(
        "--ctx",
        min=CTX_RANGE[0],
        max=CTX_RANGE[1],
        help="context size in tokens (default: config)",
    ),
]
NglOpt = Annotated[
    int | None,
    typer.Option(
        "--ngl",
        min=GPU_LAYERS_RANGE[0],
        max=GPU_LAYERS_RANGE[1],
        help="layers on the GPU (-1 = all; default: config)",
    ),
]


def checked_threads(value: int | None) -> int | None:
    """--threads where it enters (cpus.check_threads, as config.toml's `threads`): a count past
    the hard limit exits 2 naming the flag; one past the usable CPUs is one warning line."""
    if value is None:
        return None
    try:
        warning = check_threads(value)
    except ThreadCountError as exc:
        raise typer.BadParameter(str(exc)) from None
    if warning:
        print(f"warning: --threads {warning}", file=sys.stderr)
    return value


def threads_notes(value: int | None) -> list[str]:
    """--threads' warning (checked_threads) again, as a line for the TUI's startup notes: the
    TUI covers the terminal where the warning was printed."""
    warning = check_threads(value) if value else ""
    return [f"--threads {warning}"] if warning else []


ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        min=1,
        callback=checked_threads,
        help="CPU threads (default: config, else tuned, else all this process may use)",
    ),
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
SteerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--steer",
        help="steer with a concept vector: NAME:STRENGTH (a kept vector, a built-in pair or a "
        f".gguf control vector; repeatable; STRENGTH from -{STRENGTH_LIMIT:g} to "
        f"{STRENGTH_LIMIT:g}), e.g. happy:4 (see `chatapp steer`)",
    ),
]
SteerLayersOpt = Annotated[
    str | None,
    typer.Option(
        "--steer-layers",
        help="the layers the vectors are added after: START-END, both inclusive, within 1 and "
        "the model's layer count - 1 (default: all, as llama.cpp's --control-vector-layer-range)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout")]
PathArg = Annotated[Path, typer.Argument(help="a file")]


def _finite(low: float, high: float) -> Callable[[float | None], float | None]:
    """A check refusing nan, which min and max let through (every comparison with it is
    false), and inf."""

    def check(value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a number from {low:g} to {high:g}")
        return value

    return check


def within(low: float, high: float, unit: str) -> Callable[[float | None], float | None]:
    """A check for a what-if size (fit's --params, --memory): from low to high; nan refused,
    which min and max let through."""

    def check(value: float | None) -> float | None:
        if value is not None and not low <= value <= high:  # (false for nan)
            raise typer.BadParameter(
                f"{value:g} is not a number of {unit} from {low:g} to {high:g}"
            )
        return value

    return check


CLI_SAMPLERS = tuple(row for row in SLIDERS if row.cli) + tuple(
    row for row in SAMPLERS if row.cli and row.slider is None
)
"""The samplers with an option, in the sliders' order."""


def sampler_options(command: Callable) -> Callable:
    """One option per sampler the table gives the command line (--temperature, --top-k, ...,
    help and bounds from the table) in place of the command's `samplers` parameter, which
    gets them as a dict (None: not given; config fills it)."""
    sig = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for param in sig.parameters.values():
        if param.name != "samplers":
            params.append(param)
            continue
        for row in CLI_SAMPLERS:
            kind = int if row.whole else float
            low, high = (kind(row.bound.low), kind(row.bound.high))
            option = typer.Option(
                help=row.bound.help, min=low, max=high, callback=_finite(low, high)
            )  # (out of range: click's exit 2 naming the flag, as --ctx)
            # (built at run time for typer to read: mypy cannot take a variable as a type)
            annotation = Annotated[kind | None, option]  # type: ignore[valid-type]
            params.append(param.replace(name=row.name, annotation=annotation, default=None))

    @functools.wraps(command)
    def with_samplers(*args, **kwargs):
        given = {row.name: kwargs.pop(row.name, None) for row in CLI_SAMPLERS}
        return command(*args, samplers=given, **kwargs)

    # (typer reads the options from __signature__, which functions do not declare)
    with_samplers.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return with_samplers
