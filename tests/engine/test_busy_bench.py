"""`chatapp bench --busy` on the real engine, with stand-ins for llama-bench and llama-server
(tests/fakes/reference_tools.py): every round evaluates its whole prompt, and the report (text
and JSON) names its load and holds every arm's figures."""

from __future__ import annotations

import json

import pytest
from fakes import reference_tools
from helpers import run_cli

from chatapp.commands.bench_loads import compiler
from chatapp.commands.busy_bench import busy_report
from chatapp.commands.busy_text import row_lines, timeline_lines
from chatapp.engine.protocol import LoadOptions

DEPTH = 24


@pytest.mark.slow
def test_every_round_evaluates_the_whole_prompt_and_the_report_has_every_arm(model_path, tmp_path):
    """Each row ran the same rounds' prompts on the same two engines: without a fresh cache,
    the second row's prefill evaluated 1 token of 24 and took the rest from the cache."""
    bench = reference_tools.llama_bench(tmp_path, avg_ts=50.0)
    server = reference_tools.llama_server(tmp_path)
    options = LoadOptions(model_path=model_path, n_ctx=128, n_gpu_layers=0)
    report = busy_report(options, 8, DEPTH, 1, bench, server, load="spin")
    json.dumps(report)  # (all of it JSON)
    assert report["load"] == "spin" and report["depth"] == DEPTH
    names = [row["name"] for row in report["rows"]]
    cores = report["cores"]
    assert names[0] == "quiet" and names[-1] == (
        f"{cores} of {cores} cores busy" if cores > 1 else "quiet"
    )
    for row in report["rows"]:
        arms = row["arms"]
        assert {"following", "pinned", "llama-server", "llama-bench -t 1"} <= set(arms)
        for name in ("following", "pinned"):
            for run in arms[name]["runs"]:
                assert run["prompt_evaluated"] == DEPTH, (row["name"], name, run)
                assert run["tokens"] == 8
        assert arms["llama-server"]["decode_tps"] == 100.0  # (the stand-in's own timings)
        assert row["following_over_best_fixed"]["decode"] > 0
        lines = row_lines(row)
        assert lines[0].startswith(f"{row['name']}: engine decode ")
        assert any(line.startswith("  llama-server (its own thread count)") for line in lines)
    assert timeline_lines(report["timeline"], "spin")[0].startswith("spin load on 1 of ")


@pytest.mark.slow
def test_busy_json_names_its_load_on_stdout(tmp_path):
    load = "build" if compiler() else "memory"
    r = run_cli(
        "bench", "--busy", "--json", "--load", load, "--tokens", "8", "--depth", "16",
        "--reps", "1", "--ctx", "64", timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # stdout is the JSON alone; progress went to stderr
    assert report["load"] == load
    assert [row["busy_cores"] for row in report["rows"]][:2] == [0, 1]
    assert report["rows"][0]["arms"]["following"]["runs"][0]["prompt_evaluated"] == 16
    assert "timeline" in report and f"load: {load}" in r.stderr
