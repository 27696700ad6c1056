"""`chatapp machine`: the cores, caches and ceilings, measured once and kept."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from chatapp import ceilings, machine
from chatapp.cli import app


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
