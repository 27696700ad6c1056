"""Malformed JSON schemas: any of them is one GrammarError sentence naming the bad place, never
another exception (random structures thrown at the compiler), in the API and in `ask`."""

from __future__ import annotations

import json
import re

import pytest
from helpers import one_error_line, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatapp.engine.schema_check import KNOWN
from chatapp.engine.schema_grammar import GrammarError, grammar_from_schema_text, schema_to_gbnf


def _refused(schema) -> str:
    with pytest.raises(GrammarError) as err:
        schema_to_gbnf(schema)
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize(
    "schema,words",
    [
        ({"properties": ["age"]}, "properties must be an object of schemas"),
        ({"properties": "age"}, "properties must be an object of schemas"),
        ({"anyOf": 5}, "anyOf must be a non-empty list of schemas, not 5"),
        ({"oneOf": []}, "oneOf must be a non-empty list"),
        ({"properties": {"age": 5}}, "/properties/age must be a schema"),
        ({"properties": {"age": False}}, "/properties/age is `false`"),
        ({"properties": {"age": {"type": "int"}}}, "/properties/age/type must be one of"),
        ({"type": ["string", 3]}, "type must be one of"),
        ({"items": "string"}, "items must be a schema"),
        ({"prefixItems": {"type": "string"}}, "prefixItems must be a non-empty list"),
        ({"additionalProperties": 0}, "additionalProperties must be a schema"),
        ({"$defs": [1]}, "$defs must be an object of schemas"),
        ({"enum": []}, "enum must be a non-empty list of values"),
        ({"enum": "abc"}, "enum must be a non-empty list"),
        ({"required": "age"}, "required must be a list of property names"),
        ({"required": [1]}, "required must be a list of property names"),
        ({"format": ["date"]}, "format is a list, not supported"),
        ({"type": "string", "pattern": 5}, "pattern must be a string"),
        ({"type": "string", "pattern": "a+"}, "pattern must start with ^ and end with $"),
        ({"type": "string", "pattern": "^a{99999999}$"}, "/pattern has the count {99999999}"),
        ({"type": "array", "items": {}, "maxItems": 10**9}, "maxItems must be a whole number"),
        ({"type": "array", "items": {}, "minItems": 2.5}, "minItems must be a whole number"),
        ({"type": "string", "maxLength": -1}, "maxLength must be a whole number"),
        ({"type": "array", "items": {}, "minItems": 3, "maxItems": 1}, "minItems is more than"),
        ({"type": "integer", "maximum": "ten"}, "maximum must be a number"),
        ({"type": "integer", "maximum": 10**30}, "maximum is 1000000000000000000000000000000"),
        ({"type": "integer", "exclusiveMinimum": True}, "exclusiveMinimum must be a number"),
        ({"$ref": 5}, "$ref is 5, which points outside"),
        ({"$ref": "#/$defs/missing"}, '$ref is "#/$defs/missing", which names nothing'),
        ({"$defs": {"a": {}}, "$ref": "#/$defs"}, "names a part that is not a schema"),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a",
            },
            "leads back to itself through $ref",
        ),
        (
            {"properties": {"a": {"type": "string", "pattern": "^*$"}}},
            "/properties/a/pattern has *",
        ),
        ({"const": float("nan")}, "const holds nan, which JSON cannot write"),
        ({"properties": {"\ud800": {}}}, "properties holds a lone surrogate"),
        ({"not": {}}, 'the keyword "not" at /not is not supported'),
    ],
)
def test_each_malformed_part_is_one_sentence_naming_its_place(schema, words):
    assert words in _refused(schema)


def test_a_required_key_missing_from_properties_is_named():
    """The converter dropped it: replies could never validate. Refused, with the remedy."""
    text = _refused(
        {
            "type": "object",
            "properties": {"person": {"properties": {"nmae": {}}, "required": ["name"]}},
        }
    )
    assert text.startswith('/properties/person/required names "name", which is not in properties')
    assert '"name": {} takes any value' in text
    assert "required names" in _refused({"type": "object", "required": ["a"]})
    assert "root ::=" in schema_to_gbnf({"properties": {"name": {}}, "required": ["name"]})


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"type": "integer", "maximum": 1e400}', "maximum is inf, out of range"),
        (
            '{"properties": {"age": {"type": "integer", "maximum": 1e400}}}',
            "/properties/age/maximum",
        ),
        ('{"type": "integer", "minimum": NaN}', "minimum is nan, out of range"),
        ('{"type": "integer", "minimum": 1' + "0" * 5000 + "}", "not valid JSON"),
        ("[" * 5000 + "]" * 5000, "nests deeper than"),
        ('{"properties": {"a\\nb": 7}}', '"/properties/a\\nb" must be a schema'),
    ],
)
def test_schema_texts_that_broke_the_parser_or_the_bounds(text, words):
    with pytest.raises(GrammarError) as err:
        grammar_from_schema_text(text, "schema bad.json")
    assert words in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("schema bad.json")


def test_deep_nesting_is_refused_not_a_recursion_error():
    schema: dict = {"type": "string"}
    for _ in range(3000):
        schema = {"type": "array", "items": schema}
    assert "nests deeper than" in _refused(schema)


def test_refs_reach_their_own_node_whatever_its_name():
    """A $defs entry named like a built-in rule (space, string, root) kept that rule before."""
    gbnf = schema_to_gbnf(
        {
            "$defs": {"space": {"enum": ["sp"]}, "string": {"type": "integer"}},
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/space"}, "b": {"$ref": "#/$defs/string"}},
            "required": ["a", "b"],
        }
    )
    rules = dict(line.split(" ::= ", 1) for line in gbnf.splitlines())
    assert rules[rules["a"]] == '"\\"sp\\""'
    assert rules[rules["b"]] == "integer"
    tree = schema_to_gbnf(  # a recursive schema still converts
        {
            "$defs": {"node": {"type": "object", "properties": {"kids": {
                "type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node",
        }
    )  # fmt: skip
    assert "ref-node ::=" in tree


def test_a_property_named_empty_does_not_take_the_roots_rule():
    gbnf = schema_to_gbnf({"properties": {"": {"type": "integer"}}, "required": [""]})
    assert re.search(r'^root ::= "\{" ', gbnf, re.M), gbnf


# ---- random structures ----------------------------------------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats()
    | st.text(max_size=8)
)
_JSON = st.recursive(
    _SCALARS,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=20,
)
_NAMES = st.sampled_from(["a", "b", "", "space", "root", "string", "x-y", "é"])
_WORDS = st.sampled_from(
    ["object", "array", "string", "integer", "number", "#/$defs/a", "#/properties/a", "#",
     "^a$", "^[a-z]{2,4}$", "^(a|b)*$", "^*$", "date", "uuid", "email", "a"]
)  # fmt: skip
_KEYS = st.sampled_from(sorted(KNOWN) + ["not", "uniqueItems", "if"])


def _schema_like(kids):
    value = (
        kids
        | st.lists(kids, max_size=3)
        | st.dictionaries(_NAMES, kids, max_size=3)
        | st.lists(_NAMES, max_size=3)
        | _WORDS
        | _JSON
        | st.integers(min_value=-3, max_value=600)
    )
    return st.dictionaries(_KEYS, value, max_size=5)


_SCHEMAS = st.recursive(
    st.sampled_from([{}, True, False, {"type": "integer"}, {"type": "string"}]),
    _schema_like,
    max_leaves=25,
)


def _only_grammar_errors(schema) -> None:
    try:
        gbnf = schema_to_gbnf(schema)
    except GrammarError as exc:
        assert str(exc) and "\n" not in str(exc), str(exc)
        return
    assert "root ::=" in gbnf


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCHEMAS)
def test_random_schema_shapes_give_a_grammar_or_one_grammar_error(schema):
    _only_grammar_errors(schema)


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_random_json_values_give_a_grammar_or_one_grammar_error(value):
    _only_grammar_errors(value)
    try:
        grammar_from_schema_text(json.dumps(value), "schema r.json")
    except GrammarError as exc:
        assert "\n" not in str(exc)


def test_ask_with_a_malformed_schema_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"type": "object", "properties": {"age": {"type": "integer", "maximum": 1e400}}}'
    )
    line = one_error_line(run_cli("ask", "How old?", "--json-schema", str(bad)))
    assert line.startswith("schema bad.json: /properties/age/maximum is inf"), line
    bad.write_text('{"type": "object", "properties": ["age"]}')
    line = one_error_line(run_cli("ask", "How old?", "--json-schema", str(bad)))
    assert "properties must be an object of schemas" in line
