"""A schema node's keywords together: what a grammar holds exactly, the rest refused."""

from __future__ import annotations

from typing import Any

from chatapp.engine.schema_words import fail, shown

ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
HOLDERS = {"$defs", "definitions"}  # schemas kept for $ref: they say nothing of this node
INT_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
COUNTS = ("minItems", "maxItems", "minLength", "maxLength")
FAMILY = {  # the types a keyword says something about (for the others it is ignored)
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), ("string",)),
    **dict.fromkeys(INT_BOUNDS, ("integer", "number")),
    **dict.fromkeys(("items", "prefixItems", "minItems", "maxItems"), ("array",)),
    **dict.fromkeys(("properties", "required", "additionalProperties"), ("object",)),
}
FAMILY_WORD = {"string": "strings", "integer": "numbers", "array": "arrays", "object": "objects"}
INFER_ORDER = ("object", "array", "string", "integer")  # (numbers: integers, for the bounds)
KINDS = frozenset(("null", "boolean", "number", "string", "array", "object"))
WHOLE = {  # keywords that stand for the whole node here, and what to do with the others
    "$ref": "a $ref stands for the whole schema here; move it into the schema it names",
    "anyOf": "put it into each alternative",
    "oneOf": "put it into each alternative",
}
WITH_VALUES = {"type", *INT_BOUNDS, *COUNTS}  # what enum and const are checked against


def constraining(node: dict) -> list[str]:
    """The node's keywords that limit its values, in their order."""
    return [k for k in node if k not in ANNOTATIONS and k not in HOLDERS]


def declared_types(node: dict) -> list[str] | None:
    kind = node.get("type")
    if kind is None:
        return None
    return list(kind) if isinstance(kind, list) else [kind]


def shape(node: dict, path: tuple[str, ...]) -> list[str]:
    """Refuse what the node's keywords cannot mean together; the types its values are held
    to (declared, or inferred from its keywords: [] where any value goes)."""
    keys = constraining(node)
    for key, advice in WHOLE.items():
        if key in keys:
            for other in keys:
                if other != key:
                    raise fail(path + (other,), f"is not supported next to {key}: {advice}")
    if "pattern" in keys:
        for other in ("minLength", "maxLength", "format"):
            if other in keys:
                raise fail(path + (other,), "is not supported next to pattern: write it into "
                           "the pattern (a length as {1,20})")  # fmt: skip
    if "format" in keys:
        for other in ("minLength", "maxLength"):
            if other in keys:
                raise fail(path + (other,), "is not supported next to format, which fixes the "
                           "string's shape")  # fmt: skip
    types = typed(node, keys, path)
    if "enum" in node or "const" in node:
        held_values(node, keys, path)
    if "prefixItems" in node and node.get("items") is False:
        n, low = len(node["prefixItems"]), node.get("minItems", 0)
        if low > n:
            raise fail(path + ("minItems",), f"is {low}, more than the {n} items of prefixItems "
                       "(items is false); no value fits")  # fmt: skip
    return types


def typed(node: dict, keys: list[str], path: tuple[str, ...]) -> list[str]:
    """Each type-specific keyword must apply to a declared type; without one, the node is held
    to the types its keywords speak of (a subset of what it allows: replies still validate)."""
    declared = declared_types(node)
    specific = [k for k in keys if k in FAMILY]
    if declared is not None:
        for key in specific:
            if key in INT_BOUNDS and "number" in declared:
                raise fail(path + (key,), 'is not supported for type "number" (bounds work on '
                           "integers only)")  # fmt: skip
            if not set(FAMILY[key]) & set(declared):
                word = FAMILY_WORD[FAMILY[key][0]]
                raise fail(path + (key,), f"does not apply to type {shown(node['type'])}: "
                           f"it is for {word}")  # fmt: skip
        return declared
    if "enum" in node or "const" in node:
        return []
    return [t for t in INFER_ORDER if any(t in FAMILY[k] for k in specific)]


def held_values(node: dict, keys: list[str], path: tuple[str, ...]) -> None:
    """enum and const win over the rest: each value is checked against the type, bounds and
    lengths beside it, and only those that fit are kept (as `enum`)."""
    key = "const" if "const" in node else "enum"
    for other in keys:
        if other not in WITH_VALUES and other not in ("enum", "const"):
            raise fail(path + (other,), f"is not supported next to {key}: list only the values "
                       "that fit")  # fmt: skip
    values = [node["const"]] if key == "const" else node["enum"]
    kept = [v for v in values if fits(v, node)]
    if not kept:
        what = f"is {shown(values[0])}, which" if key == "const" else "has no value that"
        raise fail(path + (key,), f"{what} fits the type, enum, bounds and lengths beside it; "
                   "no reply could match")  # fmt: skip
    node["enum"] = kept
    node.pop("const", None)


def fits(value: Any, node: dict) -> bool:
    """Whether a JSON value passes the node's type, enum (for a const), bounds and lengths."""
    types = declared_types(node)
    if types is not None and not any(is_type(value, t) for t in types):
        return False
    if "const" in node and "enum" in node and not any(same(value, v) for v in node["enum"]):
        return False
    if is_type(value, "number"):
        for key, ok in (
            ("minimum", lambda b: value >= b),
            ("exclusiveMinimum", lambda b: value > b),
            ("maximum", lambda b: value <= b),
            ("exclusiveMaximum", lambda b: value < b),
        ):
            if key in node and not ok(node[key]):
                return False
    for kind, low, high in (
        ("string", "minLength", "maxLength"),
        ("array", "minItems", "maxItems"),
    ):
        if is_type(value, kind) and not node.get(low, 0) <= len(value) <= node.get(
            high, len(value)
        ):
            return False
    return True


def is_type(value: Any, name: str) -> bool:
    """JSON Schema's type test (1.0 is an integer; true is not a number)."""
    if name in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return name == "number" or isinstance(value, int) or value.is_integer()
    return kind_of(value) == name


def kind_of(value: Any) -> str:
    """The JSON kind of a value (integers and other numbers alike: number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def same(a: Any, b: Any) -> bool:
    """JSON equality (1 and 1.0 are the same; true and 1 are not)."""
    if kind_of(a) != kind_of(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


# ---- oneOf: alternatives no value can match twice ------------------------------------------


def language(node: dict, refs: dict[str, dict], seen: frozenset[str] = frozenset()):
    """What a node allows, coarsely: (kinds, values), values a list when finitely many, kinds
    every JSON kind a value it allows can have (a superset)."""
    if "enum" in node:
        return frozenset(kind_of(v) for v in node["enum"]), node["enum"]
    if "$ref" in node:
        ref = node["$ref"]
        return (KINDS, None) if ref in seen else language(refs[ref], refs, seen | {ref})
    for key in ("anyOf", "oneOf"):
        if key in node:
            parts = [language(alt, refs, seen) for alt in node[key]]
            values = [v for _, vs in parts for v in vs or ()]
            finite = all(vs is not None for _, vs in parts)
            return frozenset().union(*(k for k, _ in parts)), values if finite else None
    types = declared_types(node)
    if types is None:
        return KINDS, None
    return frozenset("number" if t == "integer" else t for t in types), None


def overlap(a, b) -> bool:
    """Whether one value might match both (False: provably none can)."""
    (kinds_a, values_a), (kinds_b, values_b) = a, b
    if values_a is not None and values_b is not None:
        return any(same(x, y) for x in values_a for y in values_b)
    if values_a is not None:
        return any(kind_of(x) in kinds_b for x in values_a)
    if values_b is not None:
        return any(kind_of(y) in kinds_a for y in values_b)
    return bool(kinds_a & kinds_b)


def check_one_of(node: dict, path: tuple[str, ...], refs: dict[str, dict]) -> None:
    """oneOf holds exactly when no value can match two alternatives: then the grammar's
    alternation writes a value that matches just the one it took."""
    langs = [language(alt, refs) for alt in node["oneOf"]]
    for i, a in enumerate(langs):
        for j in range(i + 1, len(langs)):
            if overlap(a, langs[j]):
                raise fail(path + ("oneOf",), f"has alternatives {i} and {j} that one value "
                           "could match both, and a reply must match exactly one: make them "
                           "differ by type or by value, or use anyOf")  # fmt: skip
