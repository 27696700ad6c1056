"""Structured output on the bundled model: replies that parse and validate, greedy and sampled,
the grammar's cut in the candidates, and the paths where a grammar meets the rest of the loop."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from chatapp.engine.protocol import (
    ChatMessage,
    Failed,
    Finished,
    GenerateRequest,
    StopReason,
    Token,
)
from chatapp.engine.schema_grammar import grammar_from_gbnf_text, grammar_from_schema_text
from chatapp.sampling import SamplerSettings

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 12},
            "minItems": 1,
            "maxItems": 3,
        },
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "zip": {"type": "integer", "minimum": 10000, "maximum": 99999},
                "floor": {"type": "integer", "minimum": -2, "maximum": 12},
            },
            "required": ["city", "zip", "floor"],
        },
    },
    "required": ["name", "age", "mood", "tags", "address"],
}
ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "dish": {"enum": ["soup", "salad", "pie"]},
                    "count": {"type": "integer", "minimum": 1, "maximum": 5},
                },
                "required": ["dish", "count"],
            },
            "minItems": 1,
            "maxItems": 3,
        },
        "paid": {"type": "boolean"},
    },
    "required": ["items", "paid"],
}


def check(value, schema: dict, where: str = "") -> None:
    """A JSON value against the keywords these tests use (no jsonschema package here)."""
    if "enum" in schema:
        assert value in schema["enum"], (where, value)
        return
    kind = schema["type"]
    if kind == "object":
        assert isinstance(value, dict), (where, value)
        for key in schema.get("required", []):
            assert key in value, (where, key)
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                check(value[key], sub, f"{where}/{key}")
    elif kind == "array":
        assert isinstance(value, list), (where, value)
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 10**9)
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}/{i}")
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), (where, value)
        assert schema.get("minimum", -(10**18)) <= value <= schema.get("maximum", 10**18)
    elif kind == "string":
        assert isinstance(value, str) and len(value) <= schema.get("maxLength", 10**9)
    elif kind == "boolean":
        assert isinstance(value, bool), (where, value)


def run(engine, request: GenerateRequest) -> tuple[list[Token], Finished | Failed]:
    tokens, end = [], None
    for event in engine.generate(request):
        if isinstance(event, Token):
            tokens.append(event)
        elif isinstance(event, Finished | Failed):
            end = event
    assert end is not None
    return tokens, end


def ask(schema: dict, prompt: str, settings: SamplerSettings, **more) -> GenerateRequest:
    return GenerateRequest(
        messages=(ChatMessage("user", prompt),),
        settings=settings,
        grammar=grammar_from_schema_text(json.dumps(schema), "schema test"),
        **more,
    )


SAMPLED = [SamplerSettings(temperature=0.8, seed=seed, max_tokens=300) for seed in (1, 2, 3)]
GREEDY = SamplerSettings(temperature=0.0, top_k=1, max_tokens=300)


@pytest.mark.parametrize("settings", [GREEDY, *SAMPLED], ids=["greedy", "s1", "s2", "s3"])
@pytest.mark.parametrize(
    "schema,prompt",
    [(PERSON, "Describe a person as JSON."), (ORDER, "Order lunch for two, as JSON.")],
    ids=["person", "order"],
)
def test_replies_parse_and_validate(engine, schema, prompt, settings):
    tokens, end = run(engine, ask(schema, prompt, settings))
    assert isinstance(end, Finished), end
    assert end.reason == StopReason.EOG, end.reason
    check(json.loads(end.text), schema)
    for t in tokens:  # the token taken is one the grammar allowed; its best is always shown
        assert all(c.kept_grammar for c in t.candidates if c.id == t.id), t
        assert any(c.kept_grammar for c in t.candidates), t


def test_the_candidates_show_what_the_grammar_cut(engine):
    tokens, end = run(engine, ask(PERSON, "Describe a person as JSON.", SAMPLED[0]))
    assert isinstance(end, Finished)
    cut = [c for t in tokens for c in t.candidates if not c.kept_grammar]
    assert len(cut) > len(tokens)  # the model would often write something else
    assert all(c.p_final == 0.0 for c in cut)
    # The first token: the model's favourites (newlines) are cut; the grammar allows only an
    # opening brace ("{" or '{"'), the best of which is shown with most of the probability.
    first = tokens[0].candidates
    assert not first[0].kept_grammar and first[0].p > 0.05
    kept = [c for c in first if c.kept_grammar]
    assert len(kept) == 1 and kept[0].text.startswith("{") and kept[0].p < 0.01
    assert kept[0].p_final > 0.5
    for t in tokens:
        assert sum(c.p_final for c in t.candidates) <= 1.0 + 1e-6


def test_alternatives_and_drafts_keep_to_the_grammar(engine):
    settings = SamplerSettings(temperature=0.8, seed=7, max_tokens=300)
    _, end = run(engine, ask(ORDER, "Order lunch, as JSON.", settings, n_alternatives=3))
    assert isinstance(end, Finished) and len(end.alternatives) == 3
    for text in end.alternatives:
        check(json.loads(text), ORDER)
    for draft in ("ngram", ""):
        _, end = run(engine, ask(ORDER, "Order lunch, as JSON.", GREEDY, draft=draft))
        assert isinstance(end, Finished)
        check(json.loads(end.text), ORDER)
        if draft:
            assert end.stats.draft == "ngram"


def test_a_grammar_that_does_not_parse_fails_the_reply_in_one_sentence(engine):
    request = GenerateRequest(
        messages=(ChatMessage("user", "hi"),),
        grammar=grammar_from_gbnf_text('root ::= "a" missing\n', "grammar bad.gbnf"),
    )
    _, end = run(engine, request)
    assert isinstance(end, Failed)
    assert "bad.gbnf" in end.message and "missing" in end.message and "\n" not in end.message
    _, after = run(engine, GenerateRequest(messages=(ChatMessage("user", "hi"),)))
    assert isinstance(after, Finished)  # the worker goes on


def test_a_reply_start_the_grammar_rejects_and_one_it_takes(engine):
    yes_no = grammar_from_gbnf_text('root ::= "yes" | "no"\n', "grammar yn.gbnf")
    words = [p.id for p in engine.tokenize("maybe", special=False)]
    base = {"messages": (ChatMessage("user", "Is it?"),), "grammar": yes_no}
    _, end = run(engine, GenerateRequest(**base, reply_prefix_ids=tuple(words)))
    assert isinstance(end, Failed) and "breaks grammar yn.gbnf" in end.message
    _, end = run(engine, GenerateRequest(**base, settings=GREEDY))
    assert isinstance(end, Finished) and end.text in ("yes", "no")


def test_ignoring_the_end_token_stops_when_the_grammar_is_complete(engine):
    yes_no = grammar_from_gbnf_text('root ::= "yes" | "no"\n', "grammar yn.gbnf")
    request = GenerateRequest(
        messages=(ChatMessage("user", "Is it?"),), grammar=yes_no, ignore_eos=True
    )
    _, end = run(engine, request)
    assert isinstance(end, Finished) and end.text in ("yes", "no")
    assert end.detail == "the grammar is complete"


@pytest.mark.slow
def test_ask_json_schema_on_the_command_line(tmp_path):
    path = tmp_path / "order.json"
    path.write_text(json.dumps(ORDER))
    r = run_cli("ask", "Order lunch.", "--json-schema", str(path), "--temperature", "0.8")
    assert r.returncode == 0, r.stderr
    check(json.loads(r.stdout), ORDER)
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"x": {"type": "number", "maximum": 3}}}')
    r = run_cli("ask", "hi", "--json-schema", str(bad))
    assert r.returncode == 1 and "/properties/x/maximum is not supported" in r.stderr
