"""Structured output's promise without the model: under a schema drawn from the supported
keywords, every text the grammar allows (drawn at random from it) parses and validates with
the `jsonschema` package; every other keyword, and every combination the grammar cannot hold
to, is refused naming the keyword and its place."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
from gbnf_sample import Grammar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_strategies import schemas, validate

from chatapp.engine.schema_grammar import GrammarError, schema_to_gbnf
from chatapp.engine.schema_regex import PatternError, pattern_gbnf
from chatapp.engine.schema_words import place

FEW = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def texts(schema: dict, n: int = 8, seed: int = 0) -> list[str]:
    grammar = Grammar(schema_to_gbnf(schema))
    rnd = random.Random(seed)
    return [grammar.sample(rnd) for _ in range(n)]


@FEW
@given(schemas(), st.integers(0, 2**32))
def test_every_text_the_grammar_allows_validates(schema, seed):
    jsonschema.Draft202012Validator.check_schema(schema)  # (the strategy draws valid schemas)
    for text in texts(schema, seed=seed):
        validate(json.loads(text), schema)


def _nodes(schema: dict, path: tuple[str, ...] = ()):
    """Each schema node of a schema with its path."""
    yield path, schema
    for key in ("properties", "$defs"):
        for name, sub in schema.get(key, {}).items():
            yield from _nodes(sub, path + (key, name))
    for key in ("anyOf", "oneOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key, [])):
            yield from _nodes(sub, path + (key, str(i)))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _nodes(schema[key], path + (key,))


UNKNOWN = {
    "allOf": [{}], "not": {}, "if": {}, "then": {}, "else": {}, "uniqueItems": True,
    "multipleOf": 2, "minProperties": 1, "maxProperties": 2, "patternProperties": {"^a$": {}},
    "propertyNames": {}, "contains": {}, "dependentRequired": {}, "unevaluatedItems": False,
    "unevaluatedProperties": False, "$dynamicRef": "#x", "contentEncoding": "base64",
}  # fmt: skip


def _combinations(node: dict) -> list[tuple[str, object, str]]:
    """Keywords a grammar cannot hold to beside what the node has: (keyword, value, the
    keyword the refusal names)."""
    out: list[tuple[str, object, str]] = []
    if "pattern" in node:
        out += [
            ("maxLength", 3, "maxLength"),
            ("minLength", 1, "minLength"),
            ("format", "date", "format"),
        ]
    if "format" in node:
        out += [("maxLength", 12, "maxLength")]
    if "enum" in node or "const" in node:
        out += [("properties", {}, "properties"), ("items", {}, "items")]
    if {"$ref", "anyOf", "oneOf"} & node.keys():
        out += [("type", "string", "type"), ("maxLength", 2, "maxLength")]
    if "oneOf" in node:  # an alternative twice: a value matching it matches two
        out += [("oneOf", [*node["oneOf"], node["oneOf"][0]], "oneOf")]
    kind = node.get("type")
    if kind == "number":
        out += [("minimum", 1, "minimum")]
    if kind in ("integer", "boolean", "null"):
        out += [("maxLength", 2, "maxLength"), ("properties", {}, "properties")]
    if kind == "string":
        out += [("minimum", 1, "minimum"), ("maxItems", 2, "maxItems")]
    if kind == "array":
        out += [("items", [{}], "items"), ("required", [], "required")]
    if kind == "object":
        out += [("minLength", 1, "minLength")]
    return out


@FEW
@given(schemas(), st.data())
def test_each_unsupported_keyword_is_refused_naming_it_and_its_place(schema, data):
    schema = json.loads(json.dumps(schema))  # (a copy sharing no node)
    path, node = data.draw(st.sampled_from(list(_nodes(schema))))
    options = [(k, v, k) for k, v in UNKNOWN.items()] + _combinations(node)
    key, value, named = data.draw(st.sampled_from(options))
    node[key] = value
    with pytest.raises(GrammarError) as err:
        schema_to_gbnf(schema)
    text = str(err.value)
    assert place(path + (named,)) in text, text
    assert "\n" not in text


# ---- the cases the issue found ---------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 0, "maximum": 10, "enum": [3, 5]},  # gave 10
        {"type": "integer", "maximum": 4, "enum": [3, 5]},  # 5 can never validate: left out
        {"type": ["string", "null"], "maxLength": 2},  # the maxLength was dropped
        {"type": ["integer", "boolean"], "minimum": 7, "maximum": 9},
        {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]},
        {"oneOf": [{"enum": ["a", "b"]}, {"const": "c"}]},
        {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 3, "maxItems": 3},
        {"type": "array", "prefixItems": [{"const": 1}, {"const": 2}, {"const": 3}], "maxItems": 1},
        {"enum": ["a\\b", "t\tab", 'q"', "é", "\u2028"]},  # escapes in literals
        {"type": "string", "pattern": '^[^a]{3}"\\\\$'},  # quotes, backslashes, controls
        {"type": "string", "minLength": 2, "maxLength": 2},
        {"type": "string", "format": "date"},  # a day its month has
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
    ],
)
def test_the_keywords_that_were_dropped_are_held_to(schema):
    for text in texts(schema, n=200):
        validate(json.loads(text), schema)


@pytest.mark.parametrize(
    "schema,named",
    [
        ({"allOf": [{"type": "string"}]}, "/allOf"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "/oneOf"),
        ({"oneOf": [{"type": "string"}, {"maxLength": 3}]}, "/oneOf"),
        ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "/maxLength"),
        ({"type": "string", "format": "date", "maxLength": 3}, "/maxLength"),
        ({"properties": {"a": {"type": "integer", "const": "a"}}}, "/properties/a/const"),
        ({"type": "integer", "minimum": 5, "enum": [1, 2]}, "/enum"),
        ({"type": "string", "anyOf": [{"maxLength": 1}]}, "/type"),
        ({"$defs": {"a": {}}, "$ref": "#/$defs/a", "type": "object"}, "/type"),
        ({"type": "array", "items": [{"type": "integer"}]}, "/items"),
        ({"type": "string", "maxItems": 2}, "/maxItems"),
        ({"type": "string", "pattern": "^\\d\\b$"}, "/pattern"),
        (
            {
                "$defs": {"d": {"anyOf": [{"$ref": "#/$defs/d"}, {"type": "null"}]}},
                "$ref": "#/$defs/d",
            },
            "/$defs/d/anyOf/0/$ref",
        ),
        (
            {
                "$defs": {"d": {"type": "array", "items": {"$ref": "#/$defs/d"}, "minItems": 1}},
                "$ref": "#/$defs/d",
            },
            "/$defs/d/items",
        ),
    ],
)
def test_what_it_cannot_hold_to_is_refused_naming_the_place(schema, named):
    with pytest.raises(GrammarError) as err:
        schema_to_gbnf(schema)
    assert f"{named} " in str(err.value) + " ", str(err.value)


_REGEX_CHARS = st.sampled_from(list('ab^$.*+?()[]{}|\\-,0123dwsnuxDbé"/ '))


@settings(max_examples=500, deadline=None)
@given(st.text(_REGEX_CHARS, max_size=12), st.integers(0, 2**32))
def test_a_pattern_is_translated_exactly_or_refused(body, seed):
    """Any text as a pattern: refused in a few words, or every string its grammar writes (as
    JSON) matches it with Python's re, as jsonschema checks it."""
    pattern = f"^{body}$"
    try:
        gbnf = pattern_gbnf(pattern)
    except PatternError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    grammar = Grammar(f'root ::= "\\"" {gbnf} "\\""')
    rnd = random.Random(seed)
    for _ in range(5):
        text = grammar.sample(rnd)
        assert re.search(pattern, json.loads(text)), (pattern, text)
