"""Grammars for structured output: a .gbnf file as it is, or a JSON schema converted to GBNF.

A schema is checked (schema_check.py, schema_shape.py) and converted (schema_convert.py):
each keyword is either held to exactly by the grammar or refused, naming its place, so a
reply made with the grammar always parses and validates against the schema.
"""

from __future__ import annotations

from pathlib import Path

from chatapp import jsonfile, paths
from chatapp.engine.protocol import Grammar
from chatapp.engine.schema_check import MAX_DEPTH
from chatapp.engine.schema_convert import reason, schema_to_gbnf
from chatapp.engine.schema_words import GrammarError
from chatapp.textsafe import printable

__all__ = [
    "GrammarError",
    "grammar_from_gbnf_text",
    "grammar_from_schema_text",
    "load_grammar",
    "schema_to_gbnf",
]


MAX_FILE_BYTES = 1 << 20  # a schema or grammar file is a few KB; past this it is a mistake


def grammar_from_schema_text(text: str, source: str = "schema") -> Grammar:
    """A Grammar from the text of a JSON schema; GrammarError with a sentence if it cannot."""
    try:
        schema = jsonfile.parse(text, max_depth=MAX_DEPTH * 2, where=source)
    except jsonfile.JsonFileError as exc:
        raise GrammarError(reason(exc)) from None
    try:
        gbnf = schema_to_gbnf(schema)
    except GrammarError as exc:
        raise GrammarError(f"{source}: {exc}") from None
    return Grammar(gbnf, source)


def grammar_from_gbnf_text(text: str, source: str = "grammar") -> Grammar:
    """A Grammar from GBNF text (llama.cpp parses it: a mistake fails the reply, saying where)."""
    if not text.strip():
        raise GrammarError(f"{source} is empty")
    if "\0" in text:
        raise GrammarError(f"{source} holds a NUL character; llama.cpp would read only its start")
    if "root" not in text:
        raise GrammarError(f"{source} has no `root ::= ...` rule, where llama.cpp's grammars start")
    return Grammar(text, source)


def one_line(text: str) -> str:
    """A name from the world in a one-line sentence: control characters made visible."""
    return printable(text).replace("\n", "\u240a").replace("\t", "\u2409")


def load_grammar(path: str | Path, kind: str = "") -> Grammar:
    """A Grammar from a file: a JSON schema (kind "schema", or a .json file) or GBNF (kind
    "gbnf", or any other file)."""
    p = paths.expand_user(path)
    shown, name = one_line(str(p)), one_line(p.name)
    try:
        if p.is_dir():
            raise GrammarError(f"{shown} is a folder; give a .json schema or a .gbnf file")
        with p.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise GrammarError(f"{shown} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise GrammarError(f"{shown} cannot be read: {reason}") from None
    if len(data) > MAX_FILE_BYTES:
        raise GrammarError(f"{shown} is over {MAX_FILE_BYTES >> 20} MB; a grammar is far smaller")
    if kind == "schema" or (not kind and p.suffix.lower() == ".json"):
        return grammar_from_schema_text(text, f"schema {name}")
    return grammar_from_gbnf_text(text, f"grammar {name}")
