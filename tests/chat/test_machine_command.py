"""`chatapp machine`: the cores, caches and ceilings, measured once and kept."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from chatapp import ceilings, machine
from chatapp.cli import app
from chatapp.gguf.header import read_header
from chatapp.models.token_cost import model_cost


def test_machine_measures_once_then_shows_what_it_kept(fresh_dirs, monkeypatch):
    monkeypatch.setattr(ceilings, "READ_BUFFER_MIB", 64)
    first = CliRunner().invoke(app, ["machine", "--json"])
    assert first.exit_code == 0, first.output
    facts = json.loads(first.output)
    assert facts["usable_cpus"] >= 1 and facts["ceilings"]["mem_read_gbps"] > 0
    assert machine.saved_ceilings() == facts["ceilings"]
    again = json.loads(CliRunner().invoke(app, ["machine", "--json"]).output)
    assert again["ceilings"] == facts["ceilings"]  # kept, not measured again
    text = CliRunner().invoke(app, ["machine", "--measure"]).output
    assert "GB/s" in text and "GFLOP/s" in text and "numpy's BLAS" in text


def test_ask_json_holds_the_reply_against_the_measured_ceilings(fresh_dirs, monkeypatch):
    monkeypatch.setattr(ceilings, "READ_BUFFER_MIB", 64)
    argv = ["ask", "--json", "--max-tokens", "12", "--temperature", "0", "Name a colour."]
    before = json.loads(CliRunner().invoke(app, argv).stdout)
    assert before["limits"] is None  # nothing measured yet: no ceiling to hold it against
    assert CliRunner().invoke(app, ["machine"]).exit_code == 0
    data = json.loads(CliRunner().invoke(app, argv).stdout)
    limits = data["limits"]
    depth = data["prompt_tokens"] + data["completion_tokens"] // 2
    want = model_cost(read_header(data["model"]["path"])).at(depth)
    assert limits["bytes_per_token"] == want.bytes
    assert limits["decode_gbps"] == pytest.approx(want.bytes * data["decode_tps"] / 1e9, rel=1e-3)
    assert limits["mem_peak_gbps"] == machine.saved_ceilings()["mem_read_gbps"]
    assert limits["bound"] in ("memory", "compute", "overhead")


def test_fit_says_what_decode_could_reach_on_common_devices(fresh_dirs, model_path):
    out = CliRunner().invoke(app, ["fit", model_path, "--ctx", "2048", "--json"])
    assert out.exit_code == 0, out.output
    devices = json.loads(out.stdout)["devices"]
    want = model_cost(read_header(model_path)).at(1023)
    assert devices["depth"] == 1023 and devices["bytes_per_token"] == want.bytes
    rows = devices["rows"]
    assert [r["device"] for r in rows][-1].startswith("NVIDIA H100")
    for r in rows:
        assert r["decode_ceiling_tps"] == pytest.approx(r["bandwidth_gbps"] * 1e9 / want.bytes)
    text = CliRunner().invoke(app, ["fit", model_path]).stdout
    assert "decode ceiling (bandwidth / bytes per token)" in text
