"""Structured output's promise on the bundled model: under schemas Hypothesis draws from the
supported keywords (their values kept short), every reply, greedy and sampled with several
seeds, ends with its value complete, parses and validates with the `jsonschema` package."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from schema_strategies import schemas, validate
from test_grammar_engine import run

from chatapp.engine.protocol import ChatMessage, Finished, GenerateRequest, StopReason
from chatapp.engine.schema_grammar import grammar_from_schema_text
from chatapp.sampling import SamplerSettings

MAX_TOKENS = 256  # the drawn values are short: a reply needs far fewer
RUNS = [
    SamplerSettings(temperature=0.0, top_k=1, max_tokens=MAX_TOKENS),
    *(SamplerSettings(temperature=1.0, seed=seed, max_tokens=MAX_TOKENS) for seed in (1, 2)),
]


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(bounded=True))
def test_every_reply_made_under_a_drawn_schema_validates(engine, schema):
    text = json.dumps(schema, ensure_ascii=False)
    grammar = grammar_from_schema_text(text, "schema drawn.json")
    prompt = f"Reply with JSON that fits this schema: {text[:600]}"
    for sampler in RUNS:
        request = GenerateRequest(
            messages=(ChatMessage("user", prompt),), settings=sampler, grammar=grammar
        )
        _, end = run(engine, request)
        assert isinstance(end, Finished), end
        assert end.reason == StopReason.EOG, (sampler, end.reason, end.text)
        validate(json.loads(end.text), schema)


RATING = {
    "type": "object",
    "properties": {"rating": {"type": "integer", "minimum": 0, "maximum": 10, "enum": [3, 5]}},
    "required": ["rating"],
}


def test_enum_wins_over_the_bounds_beside_it(engine):
    """The bounds' rule was written instead of the enum: seed 1 replied {"rating":6}."""
    grammar = grammar_from_schema_text(json.dumps(RATING), "schema rating.json")
    for sampler in [RUNS[0], *(SamplerSettings(temperature=1.0, seed=s) for s in (1, 2, 3))]:
        request = GenerateRequest(
            messages=(ChatMessage("user", "Rate this film from 0 to 10, as JSON."),),
            settings=sampler.with_(max_tokens=64),
            grammar=grammar,
        )
        _, end = run(engine, request)
        assert isinstance(end, Finished), end
        assert json.loads(end.text)["rating"] in (3, 5), (sampler, end.text)


@pytest.mark.slow
def test_ask_says_when_the_reply_was_cut_before_its_value_ended(tmp_path):
    """A reply cut by --max-tokens is not the schema's JSON: ask says so and exits 1."""
    path = tmp_path / "rating.json"
    path.write_text(json.dumps(RATING))
    r = run_cli("ask", "Rate it.", "--json-schema", str(path), "--max-tokens", "3")
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    line = r.stderr.strip().splitlines()[-1]  # (after the stats line)
    assert "stopped (max_tokens) before it was complete" in line, line
    assert "schema rating.json" in line and "raise --max-tokens" in line, line
