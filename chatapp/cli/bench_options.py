"""The options only `chatapp bench` takes, as typer annotations (the shared ones: options.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_DEPTH = 256
TOKENS = 128
REPS = 3

TokensOpt = Annotated[
    int | None,
    typer.Option(min=8, max=32768, help=f"tokens generated per run (default {TOKENS})"),
]
DepthOpt = Annotated[
    int | None,
    typer.Option(
        "--depth",
        "--prompt-tokens",
        min=8,
        max=4194304,
        help=f"prompt tokens per run: decode runs after them (default {DEFAULT_DEPTH})",
    ),
]
RepsOpt = Annotated[
    int | None,
    typer.Option(min=1, max=1000, help=f"repetitions, alternating (default {REPS})"),
]
LlamaBenchOpt = Annotated[
    Path | None, typer.Option("--llama-bench", help="path of llama.cpp's llama-bench")
]
LlamaServerOpt = Annotated[
    Path | None,
    typer.Option(
        "--llama-server",
        help="path of llama.cpp's llama-server: streams the same reply with top-10 "
        "log-probabilities (the peer doing the token loop's work); with --busy, one more arm "
        "under each load (on its own thread count); with --draft, its plain "
        "decode and its n-gram modes on the same greedy chats (a fresh server for each "
        "n-gram reply: those modes remember earlier replies)",
    ),
]
BusyOpt = Annotated[
    bool,
    typer.Option(
        "--busy",
        help="with programs of its own (--load) on 1, N-1 and N of N cores: the engine vs "
        "llama-bench at each fixed thread count, and when the thread count switched",
    ),
]
LoadOpt = Annotated[
    str | None,
    typer.Option(
        "--load",
        help="with --busy, what those programs do: spin (a busy loop, the default), build "
        "(a generated C file compiled in a loop with cc), memory (streaming through a "
        "large buffer)",
    ),
]
UiOpt = Annotated[bool, typer.Option("--ui", help="stream through the real TUI, headless")]
TerminalOpt = Annotated[
    bool,
    typer.Option("--terminal", help="the real TUI under tmux vs `chatapp ask`, same greedy reply"),
]
SizeOpt = Annotated[
    str | None,
    typer.Option("--size", help="with --terminal: the terminal's COLUMNSxROWS (default 160x45)"),
]
AlternativesOpt = Annotated[
    int,
    typer.Option("--alternatives", min=1, max=8, help="N replies in one batch vs one reply (2..8)"),
]
EstimateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--estimate",
        help="a GGUF file or name (repeatable): `pull --list`'s expected speed vs real decode",
    ),
]
