"""The best trade-off under a KLD budget, and saved comparisons read back (corrupt ones skipped)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chatapp.models import compare_format, compare_runs
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.compare_runs import (
    best_tradeoff,
    export_markdown,
    runs_folder,
    saved_runs,
    tradeoff_line,
)

pytestmark = pytest.mark.usefixtures("fresh_dirs")
MIB = 2**20


def run(quant: str, mib: float, kl: float | None, **kw) -> RunResult:
    return RunResult(f"/m/model.{quant}.gguf", f"model.{quant}.gguf", quant, int(mib * MIB),
                     mean_kl=kl, **kw)  # fmt: skip


RUNS = (
    run("Q8_0", 138, 0.0, is_reference=True, decode_tps=40.0, perplexity=16.6),
    run("Q4_1", 95, 0.0095, decode_tps=55.0, perplexity=16.61),
    run("Q3_K", 80, 0.09, decode_tps=60.0, perplexity=18.0),
    run("Q2_K", 70, 0.61, decode_tps=65.0, perplexity=25.6),
    run("IQ1", 40, None, error="could not load"),
)


def result(runs=RUNS, **kw) -> CompareResult:
    return CompareResult("2026-12-04T16:00:00+00:00", "Why?", 8, 1, 1024, 2, 200,
                         runs[0].path, tuple(runs), wall_s=12.0, **kw)  # fmt: skip


def test_best_tradeoff_is_the_smallest_file_within_the_budget():
    assert best_tradeoff(RUNS, 0.05).quant == "Q4_1"
    assert best_tradeoff(RUNS, 0.1).quant == "Q3_K"
    assert best_tradeoff(RUNS, 1.0).quant == "Q2_K"  # the failed file never counts
    assert best_tradeoff(RUNS, 0.0).quant == "Q8_0"  # only the reference is within 0
    assert best_tradeoff(RUNS[1:], 0.001) is None  # no reference, nothing within


def test_a_tie_in_size_goes_to_the_lower_kld():
    a, b = run("A", 50, 0.02), run("B", 50, 0.01)
    assert best_tradeoff((a, b), 0.05) is b


def test_tradeoff_line_says_why():
    r = result()
    assert tradeoff_line(r, 0.05).startswith("★ best trade-off: model.Q4_1.gguf (95.0 MiB")
    assert "the reference itself" in tradeoff_line(r, 0.0)
    assert "no file is within a mean KLD of 0.001" in tradeoff_line(result(RUNS[1:]), 0.001)
    nothing = result((RUNS[0], replace(RUNS[1], mean_kl=None)))
    assert "no file has a KLD" in tradeoff_line(nothing, 0.05)


def test_saved_runs_round_trip_newest_first_and_skip_a_corrupt_file():
    folder = runs_folder()
    folder.mkdir(parents=True)
    first = result(text_file="/t/apache-2.0.txt", text_ctx=128)
    (folder / "compare-20261204-100000-000001.json").write_text(compare_format.to_json(first))
    (folder / "compare-20261204-110000-000001.json").write_text('{"runs": [')  # cut short
    (folder / "compare-20261204-120000-000001.json").write_text(json.dumps({"runs": [1]}))
    second = result(RUNS[:2])
    (folder / "compare-20261204-130000-000001.json").write_text(compare_format.to_json(second))
    export_markdown(second)  # the Markdown export in the same folder is not a run
    runs, notes = saved_runs()
    assert [len(r.result.runs) for r in runs] == [2, 5]
    assert runs[1].result == first and runs[1].result.runs[4].error == "could not load"
    assert runs[1].result.saved_to == str(runs[1].path)
    assert "5 files: Q8_0, Q4_1, Q3_K, Q2_K, IQ1  on apache-2.0.txt (ctx 128)" in runs[1].title()
    assert len(notes) == 2 and all("\n" not in n for n in notes)
    assert notes[0].startswith("skipped compare-20261204-120000-000001.json: not a readable")


def test_no_folder_means_no_runs():
    assert saved_runs() == ([], [])


def test_compare_saves_each_run_where_saved_runs_finds_it(tmp_path):
    saved = compare_runs.save_result(result())
    runs, notes = saved_runs()
    assert notes == [] and runs[0].result == saved and str(runs[0].path) == saved.saved_to
