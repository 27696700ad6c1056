"""A JSON schema checked before conversion: every malformed part is refused naming its place.

The walk returns a clean copy of the schema (boolean schemas `true` made `{}`) with each
schema node's place (`properties.age`) and every `$ref` resolved to the node it names, so the
converter only ever sees what it can turn into a grammar that replies validate against.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

from chatapp.engine.protocol import EngineError
from chatapp.textsafe import printable


class GrammarError(EngineError):
    """A schema or grammar file that cannot be used; str() is one sentence naming the part."""


# Keywords that only describe (no effect on what is valid).
ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
INT_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
COUNTS = ("minItems", "maxItems", "minLength", "maxLength")
SCHEMA_MAPS = ("properties", "$defs", "definitions")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
OTHER = {"type", "required", "additionalProperties", "items", "enum", "const", "$ref"}
OTHER |= {"pattern", "format"}
KNOWN = ANNOTATIONS | set(INT_BOUNDS) | set(COUNTS) | set(SCHEMA_MAPS) | set(SCHEMA_LISTS)
KNOWN |= OTHER
TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
MAX_DEPTH = 32  # schemas nest a few levels; the converter recurses once per level
MAX_REPEAT = 500  # items or characters counted out one grammar term each (and a frame each)
MAX_BOUND = 2**64  # integer bounds within +-this (uint64 and int64 limits fit)
_SIMPLE = re.compile(r"[A-Za-z0-9_$-]{1,40}")
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


def place(path: tuple[str, ...]) -> str:
    """A path as the sentences name it: `properties.age.maximum` (odd names quoted)."""
    if not path:
        return "the top of the schema"
    parts = []
    for part in path:
        if _SIMPLE.fullmatch(part):
            parts.append(part)
        else:
            shown = part if len(part) <= 40 else part[:40] + "…"
            parts.append(printable(json.dumps(shown, ensure_ascii=False)))
    return ".".join(parts)


def shown(value) -> str:
    """A JSON value in a sentence: short, one line, printable (containers by their kind)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        value = value if len(value) <= 40 else value[:40] + "…"
        return printable(json.dumps(value, ensure_ascii=False))
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return printable(str(value))[:40]


def _fail(path: tuple[str, ...], what: str) -> GrammarError:
    return GrammarError(f"{place(path)} {what}")


class SchemaCheck:
    """One walk over a schema: `clean` is the copy to convert, `places` each node's path (by
    id), `refs` each `$ref` string to the clean node it names."""

    def __init__(self, schema: dict) -> None:
        self.places: dict[int, tuple[str, ...]] = {}
        self.refs: dict[str, dict] = {}
        self._pending: list[tuple[tuple[str, ...], str]] = []
        self._depth = 0  # schema nodes around the one being checked
        self.clean = self.node(schema, ())
        for path, ref in self._pending:
            self.resolve(path, ref)
        for path, ref in self._pending:
            self.no_loop(path, ref)

    def where(self, node) -> str:
        """The place of a node of the clean copy (what the converter was visiting)."""
        return place(self.places.get(id(node), ()))

    # ---- nodes ----------------------------------------------------------------------------

    def node(self, node, path: tuple[str, ...]) -> dict:
        """The clean copy of one schema node; GrammarError names what is wrong and where."""
        if self._depth >= MAX_DEPTH:
            raise _fail(path, f"nests deeper than {MAX_DEPTH} levels; flatten the schema")
        if node is True:
            node = {}
        elif node is False:
            raise _fail(path, "is `false`, which no value matches; leave it out")
        elif not isinstance(node, dict):
            raise _fail(path, f"must be a schema (an object {{...}}), not {shown(node)}")
        out: dict = {}
        self._depth += 1
        try:
            for key, value in node.items():
                out[key] = self.keyword(node, key, value, path + (key,))
        finally:
            self._depth -= 1
        self.check_required(out, path)
        self.check_counts(out, path)
        self.places[id(out)] = path
        return out

    def keyword(self, node: dict, key: str, value, path: tuple[str, ...]):
        """The clean value of one keyword of a node."""
        if not isinstance(key, str) or key not in KNOWN:
            at = place(path) if len(path) > 1 else place(())
            raise GrammarError(f"the keyword {shown(key)} at {at} is not supported")
        if key in ANNOTATIONS:
            return value
        check = _VALUES.get(key)
        if check is not None:
            return check(self, node, value, path)
        return value

    def schema_map(self, node, value, path):
        if not isinstance(value, dict):
            raise _fail(path, f"must be an object of schemas by name, not {shown(value)}")
        return {k: self.node(sub, path + (text(k, path),)) for k, sub in value.items()}

    def schema_list(self, node, value, path):
        if not isinstance(value, list) or not value:
            raise _fail(path, f"must be a non-empty list of schemas, not {shown(value)}")
        return [self.node(sub, path + (str(i),)) for i, sub in enumerate(value)]

    def items(self, node, value, path):
        if isinstance(value, list):
            return self.schema_list(node, value, path)
        if value is False and "prefixItems" in node:
            return value  # (no items past the prefix: the converter writes just those)
        return self.node(value, path)

    def additional(self, node, value, path):
        return value if isinstance(value, bool) else self.node(value, path)

    def type_(self, node, value, path):
        names = value if isinstance(value, list) else [value]
        if not names or any(not isinstance(n, str) or n not in TYPES for n in names):
            raise _fail(path, f"must be one of {', '.join(TYPES)} (or a list of them), "
                        f"not {shown(value)}")  # fmt: skip
        return value

    def required(self, node, value, path):
        if not isinstance(value, list) or any(not isinstance(n, str) for n in value):
            raise _fail(path, f"must be a list of property names, not {shown(value)}")
        for n in value:
            text(n, path)
        return value

    def bound(self, node, value, path):
        if node.get("type") != "integer":
            raise _fail(path, f"is not supported for type {shown(node.get('type', 'any'))} "
                        "(bounds work on integers only)")  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(path, f"must be a number, not {shown(value)}")
        if not math.isfinite(value) or abs(value) > MAX_BOUND:
            raise _fail(path, f"is {shown(value)}, out of range: bounds must be within "
                        f"±{MAX_BOUND:,}")  # fmt: skip
        return value

    def count(self, node, value, path):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPEAT:
            raise _fail(path, f"must be a whole number from 0 to {MAX_REPEAT}, not {shown(value)}")
        return value

    def values(self, node, value, path):
        if path[-1] == "enum" and (not isinstance(value, list) or not value):
            raise _fail(path, f"must be a non-empty list of values, not {shown(value)}")
        plain_json(value, path)
        return value

    def pattern(self, node, value, path):
        if not isinstance(value, str):
            raise _fail(path, f"must be a string (a regular expression), not {shown(value)}")
        text(value, path)
        if not (value.startswith("^") and value.endswith("$")) or len(value) < 2:
            raise _fail(path, "must start with ^ and end with $ (the reply is the whole string)")
        for low, high in _QUANTIFIER.findall(value):
            if any(n and int(n) > MAX_REPEAT for n in (low, high)):
                raise _fail(path, f"repeats more than {MAX_REPEAT} times")
        return value

    def format(self, node, value, path):
        if not isinstance(value, str) or value not in FORMATS:
            raise _fail(path, f"is {shown(value)}, not supported (one of "
                        f"{', '.join(sorted(FORMATS)[:4])}, ...)")  # fmt: skip
        return value

    def ref(self, node, value, path):
        if not isinstance(value, str) or not value.startswith("#/"):
            raise _fail(path, f"is {shown(value)}, which points outside the schema "
                        "(only #/... works)")  # fmt: skip
        text(value, path)
        self._pending.append((path, value))
        return value

    # ---- checks on a whole node -----------------------------------------------------------

    def check_required(self, node: dict, path: tuple[str, ...]) -> None:
        """A required name must be one of the node's properties: the converter would drop it
        and replies could never validate."""
        names = node.get("properties", {})
        for name in node.get("required", ()):
            if name not in names:
                raise _fail(path + ("required",), f"names {shown(name)}, which is not in "
                            f"properties; add it there ({shown(name)}: {{}} takes any value) "
                            "or take it out of required")  # fmt: skip

    def check_counts(self, node: dict, path: tuple[str, ...]) -> None:
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            if node.get(low, 0) > node.get(high, MAX_REPEAT):
                raise _fail(path + (low,), f"is more than {high}; no value fits")

    # ---- $ref -----------------------------------------------------------------------------

    def resolve(self, path: tuple[str, ...], ref: str) -> None:
        """The clean node `ref` names; GrammarError when there is none."""
        target = self.clean
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise _fail(path, f"is {shown(ref)}, which names nothing in the schema")
            target = target[part]
        if not isinstance(target, dict) or id(target) not in self.places:
            raise _fail(path, f"is {shown(ref)}, which names a part that is not a schema")
        self.refs[ref] = target

    def no_loop(self, path: tuple[str, ...], ref: str) -> None:
        """A $ref that leads only to itself (a -> b -> a) describes no value."""
        seen = {ref}
        target = self.refs[ref]
        while "$ref" in target:
            nxt = target["$ref"]
            if nxt in seen:
                raise _fail(path, f"is {shown(ref)}, which only leads back to itself")
            seen.add(nxt)
            target = self.refs[nxt]


def text(value: str, path: tuple[str, ...]) -> str:
    """A string that is text (a lone surrogate from a \\ud800 escape is not: llama.cpp gets
    UTF-8)."""
    if not isinstance(value, str):
        raise _fail(path, f"has the name {shown(value)}, which is not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(path, "holds a lone surrogate (a \\ud800 escape), which is not text") from None
    return value


def plain_json(value, path: tuple[str, ...], depth: int = 0) -> None:
    """A const or enum value must be JSON a reply can write: finite numbers, text strings."""
    if depth > MAX_DEPTH:
        raise _fail(path, f"nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, f"holds {shown(value)}, which JSON cannot write")
    if isinstance(value, str):
        text(value, path)
    elif isinstance(value, list):
        for v in value:
            plain_json(v, path, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            text(k, path)
            plain_json(v, path, depth + 1)
    elif not (value is None or isinstance(value, bool | int | float)):
        raise _fail(path, f"holds {shown(type(value).__name__)}, which is not JSON")


_VALUES: dict[str, Callable] = {
    **dict.fromkeys(SCHEMA_MAPS, SchemaCheck.schema_map),
    **dict.fromkeys(SCHEMA_LISTS, SchemaCheck.schema_list),
    **dict.fromkeys(INT_BOUNDS, SchemaCheck.bound),
    **dict.fromkeys(COUNTS, SchemaCheck.count),
    "items": SchemaCheck.items,
    "additionalProperties": SchemaCheck.additional,
    "type": SchemaCheck.type_,
    "required": SchemaCheck.required,
    "enum": SchemaCheck.values,
    "const": SchemaCheck.values,
    "pattern": SchemaCheck.pattern,
    "format": SchemaCheck.format,
    "$ref": SchemaCheck.ref,
}
