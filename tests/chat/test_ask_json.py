"""`ask --json`'s candidate rows: the probability after the samplers and the step that cut
each, as docs/ask-json.md says (the facts the Next token panel draws)."""

from __future__ import annotations

import json
import math

import pytest
from helpers import REPO, run_cli

from chatapp.commands.ask_json import candidate_row
from chatapp.engine.protocol import Candidate
from chatapp.sampling import CUTS

DOC = REPO / "docs" / "ask-json.md"


def test_a_row_says_its_probabilities_and_its_cut():
    assert candidate_row(Candidate(7, b"hi", 0.25, 0.0, "top_p")) == {
        "id": 7,
        "text": "hi",
        "p": 0.25,
        "p_after": 0.0,
        "cut_by": "top_p",
    }
    kept = candidate_row(Candidate(8, b"x", math.nan, 0.5))  # a server's after-only row
    assert kept["p"] is None and kept["p_after"] == 0.5 and kept["cut_by"] is None
    json.dumps(kept, allow_nan=False)


def test_the_doc_names_every_key_and_every_cut():
    doc = DOC.read_text()
    row = candidate_row(Candidate(1, b"a", 0.5, 0.5))
    for key in row:
        assert f"`{key}`" in doc
    for step in ("grammar", *(r.name for r in CUTS)):
        assert f"`{step}`" in doc


@pytest.mark.slow
def test_ask_json_rows_carry_the_after_column():
    """Top-k 3 of the 5 rows: the last two are cut by top-k with 0 after; the kept ones' after
    probabilities add up to 1 (top-p and min-p off), the drawn token among them."""
    r = run_cli(
        "ask", "Name a colour.", "--json", "--max-tokens", "6", "--temperature", "0.9",
        "--top-k", "3", "--top-p", "1", "--min-p", "0", "--repeat-penalty", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["sampler"]["top_k"] == 3
    for tok in data["tokens"]:
        rows = tok["top"]
        assert [set(row) for row in rows] == [{"id", "text", "p", "p_after", "cut_by"}] * 5
        assert [row["cut_by"] for row in rows] == [None] * 3 + ["top_k"] * 2
        assert sum(row["p_after"] for row in rows) == pytest.approx(1.0, abs=1e-6)
        assert all(row["p_after"] == 0 for row in rows[3:])
        assert tok["id"] in {row["id"] for row in rows[:3]}
