"""A JSON schema checked before conversion: every malformed part is refused naming its place.

The walk returns a clean copy of the schema (boolean schemas `true` made `{}`) with each
schema node's place (`/properties/age`), the types each node is held to, and every `$ref`
resolved to the node it names, so the converter only ever sees what it can turn into a
grammar that replies validate against (schema_shape.py: the keywords of a node together).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from chatapp.engine import schema_finite, schema_shape
from chatapp.engine.schema_regex import PatternError, pattern_gbnf
from chatapp.engine.schema_shape import ANNOTATIONS, COUNTS, INT_BOUNDS
from chatapp.engine.schema_words import GrammarError, fail, place, shown, text

__all__ = ["GrammarError", "SchemaCheck", "place"]

SCHEMA_MAPS = ("properties", "$defs", "definitions")
SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
OTHER = {"type", "required", "additionalProperties", "items", "enum", "const", "$ref"}
OTHER |= {"pattern", "format"}
KNOWN = ANNOTATIONS | set(INT_BOUNDS) | set(COUNTS) | set(SCHEMA_MAPS) | set(SCHEMA_LISTS)
KNOWN |= OTHER
REFUSED = {  # keywords people use that no grammar here holds, and why
    "allOf": "a grammar cannot hold a reply to several schemas at once; write its parts "
    "into one schema",
    "uniqueItems": "a grammar cannot compare items with each other",
    "multipleOf": "a grammar holds only bounds on integers",
    "not": "a grammar cannot leave out what a schema matches",
}
TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
FORMATS = {"date", "time", "date-time", "uuid"}
MAX_DEPTH = 32  # schemas nest a few levels; the converter recurses once per level
MAX_REPEAT = 500  # items or characters counted out one grammar term each (and a frame each)
MAX_BOUND = 2**64  # integer bounds within +-this (uint64 and int64 limits fit)
_fail = fail


class SchemaCheck:
    """One walk over a schema: `clean` is the copy to convert, `places` each node's path (by
    id), `types` the types each node is held to (by id; [] where any value goes), `refs` each
    `$ref` string to the clean node it names."""

    def __init__(self, schema: dict) -> None:
        self.places: dict[int, tuple[str, ...]] = {}
        self.types: dict[int, list[str]] = {}
        self.refs: dict[str, dict] = {}
        self._pending: list[tuple[tuple[str, ...], str]] = []
        self._one_of: list[tuple[tuple[str, ...], dict]] = []
        self.nodes: list[tuple[tuple[str, ...], dict]] = []  # each clean node, inner ones first
        self._depth = 0  # schema nodes around the one being checked
        self.clean = self.node(schema, ())
        for path, ref in self._pending:
            self.resolve(path, ref)
        schema_finite.check_loops(self.nodes, self.refs)
        schema_finite.check_finite(self.nodes, self.refs, self.types)
        for path, node in self._one_of:
            schema_shape.check_one_of(node, path, self.refs)

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
        self.types[id(out)] = schema_shape.shape(out, path)
        if "oneOf" in out:
            self._one_of.append((path, out))
        self.places[id(out)] = path
        self.nodes.append((path, out))
        return out

    def keyword(self, node: dict, key: str, value, path: tuple[str, ...]):
        """The clean value of one keyword of a node."""
        if not isinstance(key, str) or key not in KNOWN:
            at = place(path) if isinstance(key, str) else place(path[:-1])
            why = f": {REFUSED[key]}" if key in REFUSED else ""
            raise GrammarError(f"the keyword {shown(key)} at {at} is not supported{why}")
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
            raise _fail(path, "must be a schema (for a fixed list of items, use prefixItems)")
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
        try:
            pattern_gbnf(value)
        except PatternError as exc:
            raise _fail(path, str(exc)) from None
        return value

    def format(self, node, value, path):
        if not isinstance(value, str) or value not in FORMATS:
            raise _fail(path, f"is {shown(value)}, not supported (one of "
                        f"{', '.join(sorted(FORMATS))})")  # fmt: skip
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
