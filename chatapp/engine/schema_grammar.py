"""Grammars for structured output: a .gbnf file as it is, or a JSON schema converted to GBNF.

The conversion is llama-cpp-python's own (`llama_cpp.llama_grammar.json_schema_to_gbnf`),
loaded from its file so this process never loads llama.cpp, plus bounded integers (which it
leaves open). Keywords the converter would silently ignore are refused, naming the place:
a reply made with the grammar then always validates against the schema.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

from chatapp import jsonfile, paths
from chatapp.engine.int_range import int_bounds, int_range_rule
from chatapp.engine.protocol import Grammar
from chatapp.engine.schema_check import INT_BOUNDS, MAX_DEPTH, GrammarError, SchemaCheck
from chatapp.textsafe import printable

__all__ = ["GrammarError", "grammar_from_gbnf_text", "grammar_from_schema_text", "load_grammar"]


MAX_FILE_BYTES = 1 << 20  # a schema or grammar file is a few KB; past this it is a mistake
# What the converter raises on input it cannot take (the check before it should leave none).
CONVERTER_ERRORS = (
    AssertionError, ValueError, KeyError, TypeError, IndexError, AttributeError,
    RecursionError, OverflowError, re.error,
)  # fmt: skip


@cache
def _converter_module():
    """llama-cpp-python's llama_grammar.py, loaded on its own (it imports nothing of the
    package; importing it through the package would load the llama.cpp library here)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise GrammarError("llama-cpp-python is not installed, so a JSON schema cannot be used")
    path = Path(next(iter(spec.submodule_search_locations))) / "llama_grammar.py"
    loader = importlib.util.spec_from_file_location("chatapp_llama_grammar", path)
    if loader is None or loader.loader is None:
        raise GrammarError(f"llama-cpp-python's schema converter is missing ({path})")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def _reason(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return printable(first[:120])


@cache
def _converter_class():
    """The converter with bounded integers, a place named on any failure, and $refs that
    resolve to the node they name (its own resolution reuses any rule of the ref's last
    name: a $defs entry named `space` or `string` became that built-in rule)."""
    mod: Any = _converter_module()  # llama-cpp-python's file, loaded by path

    class Converter(mod.SchemaConverter):
        def __init__(self, check: SchemaCheck) -> None:
            super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
            self.check = check
            self._refs = check.refs
            self.ref_names: dict[str, str] = {}

        def visit(self, node, name):
            if not name and node is not self.check.clean:
                name = "unnamed"  # (a property named "": "" would take the root's name)
            try:
                if node.get("type") == "integer" and INT_BOUNDS & node.keys():
                    rule_name = name + "-" if name in mod.RESERVED_NAMES else name or "root"
                    return self._add_rule(rule_name, int_range_rule(*int_bounds(node)))
                return super().visit(node, name)
            except CONVERTER_ERRORS as exc:
                raise GrammarError(
                    f"{self.check.where(node)} cannot be made into a grammar: {_reason(exc)}"
                ) from None

        def _resolve_ref(self, ref):
            name = self.ref_names.get(ref)
            if name is None:
                base = "ref-" + mod.INVALID_RULE_CHARS_RE.sub("-", ref.rsplit("/", 1)[-1])
                name, i = base, 0
                while name in self._rules or name in self.ref_names.values():
                    i += 1
                    name = f"{base}{i}"
                self.ref_names[ref] = name  # (a ref inside its own node names it: recursion)
                rule = self.visit(self._refs[ref], name)
                if rule != name:
                    self._rules[name] = rule
            return name

    return Converter


def schema_to_gbnf(schema: dict) -> str:
    """GBNF text for a JSON schema (a dict); GrammarError names a part it cannot convert."""
    if not isinstance(schema, dict):
        raise GrammarError("the JSON schema must be an object ({...}) at its top")
    try:
        check = SchemaCheck(schema)
    except RecursionError:
        raise GrammarError(f"the schema nests deeper than {MAX_DEPTH} levels") from None
    converter = _converter_class()(check)
    try:
        converter.visit(check.clean, "")
    except RecursionError:
        raise GrammarError("the schema refers to itself too deeply to be a grammar") from None
    return converter.format_grammar()


def grammar_from_schema_text(text: str, source: str = "schema") -> Grammar:
    """A Grammar from the text of a JSON schema; GrammarError with a sentence if it cannot."""
    try:
        schema = jsonfile.parse(text, max_depth=MAX_DEPTH * 2, where=source)
    except jsonfile.JsonFileError as exc:
        raise GrammarError(_reason(exc)) from None
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
