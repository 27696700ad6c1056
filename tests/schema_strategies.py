"""Hypothesis strategies for schemas of the supported keywords, and the jsonschema validator."""

from __future__ import annotations

import datetime
import re

import jsonschema
from hypothesis import strategies as st

KINDS = ("integer", "number", "string", "boolean", "null", "array", "object")
NAMES = st.sampled_from(["a", "b", "name", "é", "a b", 'q"', "x\\y", "", "string", "root"])
_TEXT_CHARS = st.sampled_from(list('ab "\\\n\té😀/'))
TEXT = st.text(_TEXT_CHARS, max_size=4)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=2) | st.dictionaries(TEXT, kids, max_size=2),
    max_leaves=4,
)
FORMATS = ("date", "time", "date-time", "uuid")
_ATOMS = ["a", "b", "é", " ", "-", "/", '"', "\\.", "\\\\", "\\d", "\\w", "\\s", ".", "\\n"]
_ATOMS += ["[a-c]", "[^a]", "[x-z0-3_]", '["\\\\]', "[^\\n\\t]", "\\u00e9", "\\x41", "\\)"]


# ---- the validator -------------------------------------------------------------------------

_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)")
CHECKER = jsonschema.FormatChecker()  # date, uuid, ... as jsonschema checks them


@CHECKER.checks("time")
def _is_time(value) -> bool:  # (jsonschema checks it only with rfc3339-validator installed)
    return not isinstance(value, str) or bool(_TIME.fullmatch(value))


@CHECKER.checks("date-time", raises=ValueError)
def _is_date_time(value) -> bool:
    if not isinstance(value, str):
        return True
    day, sep, time = value.partition("T")
    datetime.date.fromisoformat(day)
    return bool(sep and len(day) == 10 and _TIME.fullmatch(time))


def validate(value, schema: dict) -> None:
    """jsonschema's verdict (2020-12, formats checked): raises ValidationError on a mismatch."""
    jsonschema.Draft202012Validator(schema, format_checker=CHECKER).validate(value)


# ---- schemas --------------------------------------------------------------------------------


@st.composite
def patterns(draw, bounded: bool) -> str:
    quantifiers = ["", "", "?", "{2}", "{1,3}", "{0,2}"] + ([] if bounded else ["*", "+", "{2,}"])

    def seq(depth: int) -> str:
        parts = []
        for _ in range(draw(st.integers(1, 3))):
            if depth < 2 and draw(st.integers(0, 4)) == 0:
                alts = [seq(depth + 1) for _ in range(draw(st.integers(1, 2)))]
                atom = "(" + "|".join(alts) + ")"
            else:
                atom = draw(st.sampled_from(_ATOMS))
            parts.append(atom + draw(st.sampled_from(quantifiers)))
        return "".join(parts)

    return "^" + seq(0) + "$"


@st.composite
def integers(draw) -> dict:
    node: dict = {"type": "integer"}
    lo = draw(st.none() | st.integers(-(10**6), 10**6))
    hi = draw(st.none() | st.integers(-(10**6), 10**6))
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    if lo is not None:
        key, value = draw(st.sampled_from([("minimum", lo), ("exclusiveMinimum", lo - 1)]))
        node[key] = value - 0.5 if draw(st.booleans()) and key == "minimum" else value
    if hi is not None:
        key, value = draw(st.sampled_from([("maximum", hi), ("exclusiveMaximum", hi + 1)]))
        node[key] = value
    return node


@st.composite
def strings(draw, bounded: bool) -> dict:
    how = draw(st.sampled_from(["plain", "lengths", "pattern", "format"]))
    if how == "plain" and not bounded:
        return {"type": "string"}
    if how == "pattern":
        return {"type": "string", "pattern": draw(patterns(bounded))}
    if how == "format":
        return {"type": "string", "format": draw(st.sampled_from(FORMATS))}
    lo = draw(st.integers(0, 3))
    return {"type": "string", "minLength": lo, "maxLength": draw(st.integers(lo, lo + 5))}


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


@st.composite
def values(draw) -> dict:
    """enum or const, sometimes with a type, bounds or lengths that the first value fits (the
    others may not: they must never be written)."""
    picked = draw(st.lists(VALUES, min_size=1, max_size=4))
    first = picked[0]
    node: dict = {"const": first} if len(picked) == 1 and draw(st.booleans()) else {"enum": picked}
    if draw(st.booleans()):
        node["type"] = json_type(first)
        if node["type"] == "integer" and draw(st.booleans()):
            node["minimum"] = first - draw(st.integers(0, 3))
            node["maximum"] = first + draw(st.integers(0, 3))
        if node["type"] == "string" and draw(st.booleans()):
            node["maxLength"] = len(first) + draw(st.integers(0, 2))
    return node


def typed(kind: str, kids, bounded: bool):
    """A schema of one declared type (containers hold `kids`)."""
    if kind == "integer":
        return integers()
    if kind == "string":
        return strings(bounded)
    if kind == "array":
        return arrays(kids, bounded)
    if kind == "object":
        return objects(kids, bounded)
    return st.just({"type": kind})


@st.composite
def arrays(draw, kids, bounded: bool) -> dict:
    node: dict = {"type": "array"}
    if draw(st.booleans()):
        node["prefixItems"] = draw(st.lists(kids, min_size=1, max_size=3))
        items = draw(st.sampled_from(["absent", "false", "schema"]))
        if items == "false":
            node["items"] = False
        elif items == "schema":
            node["items"] = draw(kids)
        top = len(node["prefixItems"]) if items == "false" else 4
    else:
        node["items"] = draw(kids)
        top = 4
    lo = draw(st.integers(0, top))
    if draw(st.booleans()) or not bounded or "items" in node and node["items"] is not False:
        if lo:
            node["minItems"] = lo
        if bounded or draw(st.booleans()):
            node["maxItems"] = draw(st.integers(lo, max(lo, min(top, 3) if bounded else top)))
    return node


@st.composite
def objects(draw, kids, bounded: bool) -> dict:
    props = draw(st.dictionaries(NAMES, kids, max_size=3))
    node: dict = {"type": "object", "properties": props}
    names = sorted(props)
    if names:
        node["required"] = draw(st.lists(st.sampled_from(names), unique=True))
    extra = draw(st.sampled_from(["absent", "false", "true", "schema"]))
    if extra == "false" or bounded and not props:
        node["additionalProperties"] = False
    elif extra == "true":
        node["additionalProperties"] = True
    elif extra == "schema":
        node["additionalProperties"] = draw(kids)
    return node


@st.composite
def type_lists(draw, bounded: bool) -> dict:
    kinds = draw(st.lists(st.sampled_from(KINDS[:5]), min_size=2, max_size=3, unique=True))
    if "integer" in kinds and "number" in kinds:
        kinds.remove("number")
    node: dict = {"type": kinds if len(kinds) > 1 else kinds[0]}
    if "string" in kinds:
        node["maxLength"] = draw(st.integers(0, 5))
    if "integer" in kinds and draw(st.booleans()):
        node["minimum"] = draw(st.integers(-5, 5))
    return node


@st.composite
def one_ofs(draw, kids, bounded: bool) -> dict:
    """Alternatives no value matches twice: each of its own type, or enums of distinct values."""
    if draw(st.booleans()):
        words = draw(st.lists(TEXT, min_size=2, max_size=3, unique=True))
        return {"oneOf": [{"enum": [w]} for w in words]}
    kinds = draw(st.lists(st.sampled_from(KINDS[1:]), min_size=2, max_size=3, unique=True))
    return {"oneOf": [draw(typed(k, kids, bounded)) for k in kinds]}


def schemas(bounded: bool = False):
    """Schemas of the supported keywords, a few levels deep, sometimes with $defs and $ref.
    `bounded`: only short values (strings, arrays and objects with a most), for replies of the
    real model within a modest token budget."""
    leaves = st.one_of(
        integers(),
        strings(bounded),
        values(),
        type_lists(bounded),
        st.sampled_from([{"type": "number"}, {"type": "boolean"}, {"type": "null"}]),
        *([] if bounded else [st.just({}), st.just({"title": "anything"})]),
    )

    def grow(kids):
        return st.one_of(
            arrays(kids, bounded),
            objects(kids, bounded),
            st.lists(kids, min_size=1, max_size=3).map(lambda alts: {"anyOf": alts}),
            one_ofs(kids, bounded),
        )

    ref = st.just({"$ref": "#/$defs/d"})
    tree = st.recursive(leaves | ref, grow, max_leaves=5 if bounded else 10)
    nested = st.builds(  # a tree: each node may hold more like it
        lambda leaf: {
            "type": "object",
            "properties": {"v": leaf, "kids": {"type": "array", "items": {"$ref": "#/$defs/d"}}},
            "required": ["v"],
        },
        leaves,
    )
    definition = leaves if bounded else leaves | nested
    return st.builds(lambda d, top: {"$defs": {"d": d}, **top}, definition, tree)
