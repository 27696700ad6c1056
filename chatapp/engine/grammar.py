"""Grammars for structured output: a .gbnf file as it is, or a JSON schema converted to GBNF.

The conversion is llama-cpp-python's own (`llama_cpp.llama_grammar.json_schema_to_gbnf`),
loaded from its file so this process never loads llama.cpp, plus bounded integers (which it
leaves open). Keywords the converter would silently ignore are refused, naming the place:
a reply made with the grammar then always validates against the schema.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

from chatapp.engine.int_range import int_bounds, int_range_rule
from chatapp.engine.protocol import EngineError, Grammar


class GrammarError(EngineError):
    """A schema or grammar file that cannot be used; str() is one sentence naming the part."""


# Keywords that only describe (no effect on what is valid).
ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
# Keywords the converter turns into grammar rules.
CONVERTED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "pattern", "format", "minLength", "maxLength",
}  # fmt: skip
INT_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}


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


def schema_to_gbnf(schema: dict) -> str:
    """GBNF text for a JSON schema (a dict); GrammarError names a part it cannot convert."""
    if not isinstance(schema, dict):
        raise GrammarError("the JSON schema must be an object ({...}) at its top")
    check_schema(schema)
    mod = _converter_module()

    class Converter(mod.SchemaConverter):
        def visit(self, node, name):
            if node.get("type") == "integer" and INT_BOUNDS & node.keys():
                rule_name = name + "-" if name in mod.RESERVED_NAMES else name or "root"
                return self._add_rule(rule_name, int_range_rule(*int_bounds(node)))
            return super().visit(node, name)

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        resolved = converter.resolve_refs(schema, "input")
        converter.visit(resolved, "")
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GrammarError(f"the JSON schema cannot be made into a grammar: {reason}") from None
    return converter.format_grammar()


def check_schema(node, where: str = "") -> None:
    """Refuse, naming the place, what the converter would leave unchecked."""
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise GrammarError(f"the schema at {where or '/'} is not an object")
    types = node.get("type")
    for key in node:
        if key in ANNOTATIONS or key in CONVERTED:
            continue
        if key in INT_BOUNDS and types == "integer":
            if isinstance(node[key], bool) or not isinstance(node[key], int | float):
                raise GrammarError(f"{key} at {where or '/'} must be a number")
            continue
        if key in INT_BOUNDS:
            raise GrammarError(
                f"{key} at {where or '/'} is not supported for type {types or 'any'} "
                "(bounds work on integers only)"
            )
        raise GrammarError(f"the keyword {key!r} at {where or '/'} is not supported")
    ref = node.get("$ref")
    if ref is not None and not str(ref).startswith("#/"):
        raise GrammarError(
            f"the $ref {ref!r} at {where or '/'} points outside the schema (only #/... works)"
        )
    fmt = node.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise GrammarError(
            f"format {fmt!r} at {where or '/'} is not supported ({', '.join(sorted(FORMATS)[:4])})"
        )
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            check_schema(sub, f"{where}/{key}/{name}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or ()):
            check_schema(sub, f"{where}/{key}/{i}")
    items = node.get("items")
    if isinstance(items, list):
        for i, sub in enumerate(items):
            check_schema(sub, f"{where}/items/{i}")
    elif items is not None:
        check_schema(items, f"{where}/items")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        check_schema(extra, f"{where}/additionalProperties")


def grammar_from_schema_text(text: str, source: str = "schema") -> Grammar:
    """A Grammar from the text of a JSON schema; GrammarError with a sentence if it cannot."""
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GrammarError(
            f"{source} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    try:
        gbnf = schema_to_gbnf(schema)
    except GrammarError as exc:
        raise GrammarError(f"{source}: {exc}") from None
    return Grammar(gbnf, source)


def grammar_from_gbnf_text(text: str, source: str = "grammar") -> Grammar:
    """A Grammar from GBNF text (llama.cpp parses it: a mistake fails the reply, saying where)."""
    if not text.strip():
        raise GrammarError(f"{source} is empty")
    if "root" not in text:
        raise GrammarError(f"{source} has no `root ::= ...` rule, where llama.cpp's grammars start")
    return Grammar(text, source)


def load_grammar(path: str | Path, kind: str = "") -> Grammar:
    """A Grammar from a file: a JSON schema (kind "schema", or a .json file) or GBNF (kind
    "gbnf", or any other file)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GrammarError(f"{p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise GrammarError(f"{p} cannot be read: {reason}") from None
    if kind == "schema" or (not kind and p.suffix.lower() == ".json"):
        return grammar_from_schema_text(text, f"schema {p.name}")
    return grammar_from_gbnf_text(text, f"grammar {p.name}")
