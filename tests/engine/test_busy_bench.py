"""`chatapp bench --busy` on the real engine, with stand-ins for llama-bench and llama-server
(tests/fakes/reference_tools.py): every round evaluates its whole prompt, and the report (JSON,
and the text made of it) names its load and holds every arm's figures."""

from __future__ import annotations

import json

import pytest
from fakes import reference_tools
from helpers import run_cli

from chatapp.commands.bench.busy_text import row_lines, timeline_lines
from chatapp.commands.bench.loads import compiler

DEPTH = 24


@pytest.mark.slow
def test_busy_json_has_every_arm_and_every_round_evaluates_its_whole_prompt(tmp_path):
    """Each row runs the same rounds' prompts on the same two engines: without a fresh cache,
    the second row's prefill evaluated 1 token of 24 and took the rest from the cache."""
    load = "build" if compiler() else "memory"
    bench = reference_tools.llama_bench(tmp_path, avg_ts=50.0)
    server = reference_tools.llama_server(tmp_path)
    r = run_cli(
        "bench", "--busy", "--json", "--load", load, "--tokens", "8", "--depth", str(DEPTH),
        "--reps", "1", "--ctx", "64", "--llama-bench", str(bench), "--llama-server", str(server),
        timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # stdout is the JSON alone; progress went to stderr
    assert report["load"] == load and report["depth"] == DEPTH
    assert f"load: {load}" in r.stderr
    cores = report["cores"]
    assert [row["busy_cores"] for row in report["rows"]][:2] == [0, 1]
    assert report["rows"][-1]["name"] == f"{cores} of {cores} cores busy"
    for row in report["rows"]:
        arms = row["arms"]
        assert {"following", "pinned", "llama-server", "llama-bench -t 1"} <= set(arms)
        for name in ("following", "pinned"):
            for run in arms[name]["runs"]:
                assert run["prompt_evaluated"] == DEPTH, (row["name"], name, run)
                assert run["tokens"] == 8
        assert arms["llama-server"]["decode_tps"] == 100.0  # (the stand-in's own timings)
        assert arms["llama-bench -t 1"]["decode_tps"] == 50.0
        assert row["following_over_best_fixed"]["decode"] > 0
        lines = row_lines(row)
        assert lines[0].startswith(f"{row['name']}: engine decode ")
        assert "  llama-server (its own thread count): decode 100.0" in "\n".join(lines)
    assert timeline_lines(report["timeline"], load)[0].startswith(f"{load} load on 1 of ")
