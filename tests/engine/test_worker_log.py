"""The worker log is read in one place: WorkerLog (what this worker wrote, rotation)."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.local.load import worker_log
from chatapp.engine.local.load.worker_log import WorkerLog


def test_worker_log_reads_only_this_workers_part(tmp_path: Path, monkeypatch) -> None:
    log = WorkerLog(tmp_path / "logs" / "worker.log")
    log.begin()  # no file yet
    assert log.start == 0 and log.text() == "" and log.tail() == ""
    log.path.write_text("llama_model_loader: old worker\n")
    log.begin()
    with log.path.open("a") as fh:
        fh.write("llama_model_load: error loading model: bad tensor\n")
    assert log.text() == "llama_model_load: error loading model: bad tensor\n"
    assert worker_log.load_error_from_log(log.text()) == "bad tensor"
    assert "bad tensor" in log.tail()
    monkeypatch.setattr(worker_log, "LOG_LIMIT", 10)
    log.begin()  # past the limit: the old log moves aside, this worker starts a new one
    assert log.start == 0 and not log.path.exists()
    assert log.path.with_name("worker.log.1").exists()
