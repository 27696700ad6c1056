"""The options of `chat` and `ask` that no other command takes, as typer annotations."""

from __future__ import annotations

from typing import Annotated

import typer

from chatapp.cli.checks import some_file, some_text

SystemOpt = Annotated[
    str | None, typer.Option(help="system prompt: text, or @NAME for a named one")
]
AutotuneOpt = Annotated[
    bool | None,
    typer.Option(
        "--autotune/--no-autotune",
        help="tune on first use: measure flash attention and threads for a file with no "
        "saved tune, while you type (default: config, else on)",
    ),
]
VsOpt = Annotated[
    str | None,
    typer.Option(
        "--vs",
        help="a second GGUF file or name: each prompt goes to both, side by side (greedy)",
    ),
]
PromptArg = Annotated[str, typer.Argument(help="what to ask", callback=some_text)]
StopOpt = Annotated[list[str] | None, typer.Option(help="stop string (repeatable)")]
AskJsonOpt = Annotated[bool, typer.Option("--json", help="one JSON object on stdout")]
JsonSchemaOpt = Annotated[
    str | None, typer.Option(help="a JSON schema file: the reply is JSON that follows it")
]
GrammarOpt = Annotated[
    str | None,
    typer.Option(
        help="a GBNF grammar file (llama.cpp's): the reply follows it", callback=some_file
    ),
]
FileOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--file", help="attach a text file (repeatable; - reads stdin)", callback=some_file
    ),
]
RawOpt = Annotated[
    bool,
    typer.Option("--raw", help="the prompt as is, without the chat template (base models)"),
]
