"""Structured output without the model: schemas to GBNF, bounded integers, refusals, and the
candidates under a grammar against a full-vocabulary reference."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from test_candidates import SETTINGS, _logits, _reference

from chatapp.engine.int_range import int_range_rule
from chatapp.engine.local.loop.candidates import rank, ranked_size
from chatapp.engine.local.loop.grammar_sampler import grammar_candidates
from chatapp.engine.schema_grammar import GrammarError, load_grammar, schema_to_gbnf


def _as_regex(rule: str) -> re.Pattern:
    """The bounded-integer rules use literals, classes, groups, |, * and {m,n} only: a regex
    each."""
    out = []
    pieces = r'"([^"]*)"|(\[[^\]]*\])|([()|*]|\{\d+,\d+\})'
    for lit, cls, op in re.findall(pieces, rule.replace(" space", "")):
        out.append(re.escape(lit) if lit else cls or op)
    return re.compile("^(?:" + "".join(out) + ")$")


@pytest.mark.parametrize(
    "lo,hi",
    [(0, 9), (1, 5), (0, 100), (-5, 5), (-100, -3), (13, 987), (10, 10), (-1234, 56),
     (0, None), (7, None), (-5, None), (None, 0), (None, -4), (None, 250)],
)  # fmt: skip
def test_bounded_integers_match_exactly_their_range(lo, hi):
    rx = _as_regex(int_range_rule(lo, hi))
    for n in range(-2100, 2100):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(rx.match(str(n))) == inside, (lo, hi, n)
    for text in ("01", "007", "+1", "1.0", "-0" if lo is None or lo >= 0 else "x"):
        assert not rx.match(text), text
    if hi is None:  # open upward: as llama.cpp's converter, at most 16 digits
        assert rx.match("9" * 16) and not rx.match("1" + "0" * 16)


def test_a_schema_becomes_gbnf_with_its_bounds():
    gbnf = schema_to_gbnf(
        {
            "type": "object",
            "properties": {
                "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 121},
                "mood": {"enum": ["happy", "sad"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            },
            "required": ["age", "mood"],
        }
    )
    assert re.search(r'^age ::= .*"1" "2" "0"', gbnf, re.M)
    assert '"\\"happy\\""' in gbnf and "root ::=" in gbnf


@pytest.mark.parametrize(
    "schema,names",
    [
        ({"type": "number", "minimum": 1}, ["minimum", "number"]),
        (
            {"properties": {"a": {"type": "array", "uniqueItems": True}}},
            ["uniqueItems", "/properties/a/uniqueItems"],
        ),
        (
            {"properties": {"e": {"type": "string", "format": "email"}}},
            ["email", "/properties/e/format"],
        ),
        ({"$ref": "https://example.com/s.json"}, ["$ref", "outside"]),
        ({"type": "integer", "minimum": 5, "maximum": 2}, ["no integer"]),
        ({"not": {"type": "string"}}, ['"not"', "at /not"]),
        ([1, 2], ["object"]),
    ],
)
def test_a_schema_it_cannot_hold_to_is_one_sentence_naming_the_part(schema, names):
    with pytest.raises(GrammarError) as err:
        schema_to_gbnf(schema)
    text = str(err.value)
    assert "\n" not in text
    for name in names:
        assert name in text, text


def test_grammar_files(tmp_path):
    (tmp_path / "s.json").write_text('{"type": "object", "properties": {"a": {"enum": [1, 2]}}}')
    (tmp_path / "bad.json").write_text('{"type": ')
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"\n')
    (tmp_path / "empty.gbnf").write_text("\n")
    g = load_grammar(tmp_path / "s.json")
    assert g.source == "schema s.json" and "root ::=" in g.gbnf
    assert load_grammar(tmp_path / "g.gbnf").gbnf.startswith("root ::=")
    for name, words in [
        ("bad.json", "not valid JSON"),
        ("empty.gbnf", "empty"),
        ("missing.json", "does not exist"),
    ]:
        with pytest.raises(GrammarError, match=words):
            load_grammar(tmp_path / name)


def _allowed(seed: int, logits: np.ndarray, share: float) -> np.ndarray:
    """A grammar's verdict: a random share of the vocabulary, some favourites among them."""
    rng = np.random.default_rng(seed + 100)
    ok = rng.random(logits.shape[0]) < share
    ok[np.argsort(logits)[-3:]] = [False, True, False]
    return ok


@pytest.mark.parametrize("share", [0.002, 0.3])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"t{s.temperature}k{s.top_k}")
def test_candidates_under_a_grammar_match_the_reference(settings, share):
    """What the Next token panel shows with a grammar: the best raw candidates, each cut by the
    grammar marked, and after the samplers the chain's probabilities over what it allows (both
    paths: the ranked ones sufficed, or the whole vocabulary was masked)."""
    w = SimpleNamespace(piece=lambda i: b"")
    for seed in range(3):
        logits = _logits(seed, 2.0)
        ok_all = _allowed(seed, logits, share)
        masked = np.where(ok_all, logits, -np.inf).astype(np.float32)
        recent = {int(t) for t in np.argsort(logits)[-30:][::3]}
        m = ranked_size(settings, 10, logits.shape[0])
        idx, log_z = rank(logits, m)
        ok = ok_all[idx]
        want = {r[0]: r[2:] for r in _reference(masked, settings, recent)}
        need = 1 if settings.greedy else settings.top_k
        lowered = recent if settings.repeat_penalty != 1.0 else set()
        ranked_ok = [t for t in idx[ok].tolist() if t not in lowered]
        for full in (masked, None):
            if full is None and not 0 < need <= len(ranked_ok):
                continue  # (the token loop masks the whole vocabulary then: grammar.enough)
            got = grammar_candidates(w, logits, idx, ok, log_z, full, settings, recent, m, 10)
            assert len(got) == 10
            assert any(c.kept_grammar for c in got)  # the grammar's best is always shown
            for c in got:
                assert c.kept_grammar == bool(ok_all[c.id])
                if not c.kept_grammar:
                    assert c.p_final == 0.0
                    continue
                p_final, cut_by = want[c.id]
                assert c.p_final == pytest.approx(p_final, rel=1e-3, abs=1e-7), (c, full)
                assert c.cut_by == cut_by
