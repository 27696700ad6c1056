"""Compared files' decode ceilings: bytes a token from the header, the share reached, the order."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chatapp.gguf.header import read_header
from chatapp.models.compare_ceilings import order_note, with_ceiling
from chatapp.models.compare_format import format_table
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.token_cost import model_cost


def _run(path: str, name: str, quant: str, tps: float) -> RunResult:
    return RunResult(path, name, quant, 1, decode_tps=tps, prompt_tokens=40, completion_tokens=60)


def test_a_run_gets_its_bytes_per_token_and_ceiling(model_path):
    run = with_ceiling(_run(model_path, "a.gguf", "Q4_1", 50.0), gbps=10.0)
    want = model_cost(read_header(model_path)).at(40 + 30).bytes
    assert run.bytes_per_token == want
    assert run.decode_ceiling_tps == pytest.approx(10e9 / want)
    assert run.ceiling_share == pytest.approx(50.0 / run.decode_ceiling_tps)
    failed = replace(_run(model_path, "b.gguf", "Q4_1", 0.0), error="did not load")
    assert with_ceiling(failed, 10.0) == failed  # nothing to hold against the ceiling


def test_the_order_of_speeds_is_checked_against_the_ceilings():
    big = replace(_run("a", "q8.gguf", "Q8_0", 80.0), decode_ceiling_tps=100.0)
    small = replace(_run("b", "q2.gguf", "Q2_K", 60.0), decode_ceiling_tps=250.0)
    assert "order the ceilings predict" in order_note((big, replace(small, decode_tps=90.0)))
    note = order_note((big, small))
    assert note.startswith("q2.gguf reads fewer bytes a token than q8.gguf but decodes slower")
    assert "Q2_K vs Q8_0" in note


def test_the_table_shows_the_ceilings(model_path):
    runs = tuple(
        with_ceiling(_run(model_path, n, "Q4_1", tps), 10.0) for n, tps in (("a", 50), ("b", 40))
    )
    result = CompareResult("now", "p", 60, 1, 1024, 2, 10, model_path, runs, mem_read_gbps=10.0)
    table = format_table(result)
    assert "decode ceiling here: 10.0 GB/s read / bytes per token" in table
    assert "MB a token" in table and "reached" in table
