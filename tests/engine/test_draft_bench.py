"""`chatapp bench --draft --llama-server`: the arms it runs, on the real engine and a stand-in
llama-server (tests/fakes/llama_server.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatapp.commands.bench.draft import SERVER_MODES, run_draft_bench, task_line
from chatapp.commands.bench.draft_tasks import DraftTask
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path

FAKE = Path(__file__).parent.parent / "fakes" / "llama_server.py"


@pytest.fixture
def fake_server(tmp_path) -> Path:
    exe = tmp_path / "llama-server"
    run = f"import runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
    exe.write_text(f"#!{sys.executable}\n{run}")
    exe.chmod(0o755)
    return exe


def test_each_n_gram_mode_meets_the_task_once(fake_server):
    """llama-server's n-gram modes keep their tables between requests, so the same prompt sent
    again would be drafted from its earlier reply: each measured reply of those modes gets a
    server that saw only its one-token warm-up; the plain decode keeps one server."""
    task = DraftTask("tiny", "Say hello.", tokens=4)
    options = LoadOptions(model_path=str(smollm2_path()), n_ctx=512)
    report = run_draft_bench(options, "ngram", 3, tasks=(task,), llama_server=fake_server)
    server = report["tasks"]["tiny"]["llama-server"]
    assert set(server["modes"]) == set(SERVER_MODES) - {"none"}
    for mode in server["modes"].values():
        assert mode["accepted"] == "0/1"  # (the fake counts the requests its process saw before)
    assert server["plain_decode_tps"] == 100.0
    assert report["tasks"]["tiny"]["chatapp"]["tokens"] > 0
    # (the stand-in writes nothing: its greedy reply is not the engine's, and the line says so)
    assert server["same_text_as_chatapp"] is False
    line = task_line("tiny", report["tasks"]["tiny"])
    assert "another text here" in line
    # each n-gram mode's reply is not the plain one's: its ratio is starred, and the line says why
    assert all(not mode["same_as_plain"] for mode in server["modes"].values())
    assert "ngram-mod 1.00x*" in line and "is not its plain one" in line


def test_the_server_arms_run_the_engines_kernels(fake_server, tmp_path):
    """Where the engine's batches are exact, llama-server's arms run flash attention over a
    Q8_0 K cache as well, so every arm writes the same greedy text (its default kernels draft
    another text: other work); where they are not, its own defaults."""
    from contextlib import ExitStack

    from chatapp.commands.bench.draft import _servers

    options = LoadOptions(model_path=str(smollm2_path()), n_ctx=512)
    with ExitStack() as stack:
        exact = _servers(fake_server, options, str(tmp_path), stack, exact=True)
        plain = _servers(fake_server, options, str(tmp_path), stack, exact=False)
    for mode in SERVER_MODES:
        flags = exact[mode].extra
        assert flags[flags.index("-ctk") + 1] == "q8_0" and flags[flags.index("-fa") + 1] == "on"
        assert "-ctk" not in plain[mode].extra
        assert plain[mode].extra[plain[mode].extra.index("-fa") + 1] == "auto"
