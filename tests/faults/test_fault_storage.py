"""A broken history database through `chatapp history`: one `error:` line naming the file, the
file left as it was. (Store-level faults: disk full, read-only, deleted while running, two
writers, are in tests/chat/test_store.py.)"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from helpers import one_error_line, run_cli

from chatapp.history.store import SCHEMA_VERSION, Store


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def history(data_dir: Path, *args: str):
    return run_cli("history", *args, env={"CHATAPP_DATA_DIR": str(data_dir)})


def _good(db: Path) -> Path:
    with Store(db) as store:
        cid = store.create_conversation("Sea")
        for i in range(40):  # a few pages, so that cutting the file damages a table
            store.add_message(cid, "user", f"message {i} " * 40)
    return db


def _garbage(db: Path) -> Path:
    db.parent.mkdir(parents=True)
    db.write_bytes(os.urandom(4096))
    return db


def _newer(db: Path) -> Path:
    _good(db)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 98}")
    conn.close()  # the last connection out checkpoints the WAL into the file
    return db


def _truncated(db: Path) -> Path:
    _good(db)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    return db


def _directory(db: Path) -> Path:
    db.mkdir(parents=True)
    return db


CASES = {
    "not-a-database": (
        _garbage,
        "could not open the history: {db} is not a valid chatapp history database "
        "(file is not a database)",
    ),
    "newer-version": (
        _newer,
        f"the history database {{db}} was written by a newer chatapp (schema "
        f"{SCHEMA_VERSION + 98}, this one knows {SCHEMA_VERSION}); upgrade chatapp or set "
        "CHATAPP_DATA_DIR",
    ),
    "truncated": (
        _truncated,
        "could not open the history: {db} is not a valid chatapp history database "
        "(database disk image is malformed)",
    ),
    "directory": (
        _directory,
        "the history database {db} is a directory; move it away or set CHATAPP_DATA_DIR",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("command", [["list"], ["show", "1"], ["delete", "1", "--yes"]])
def test_broken_database(data_dir, name, command):
    make, message = CASES[name]
    db = make(data_dir / "history.db")
    before = db.read_bytes() if db.is_file() else None
    assert one_error_line(history(data_dir, *command)) == message.format(db=db)
    if before is not None:
        assert db.read_bytes() == before, "the database is left byte-identical"


def test_empty_database_file_is_an_empty_history(data_dir):
    db = data_dir / "history.db"
    data_dir.mkdir()
    db.touch()  # created and never written (a crash before the first write, or `touch`)
    r = history(data_dir, "list")
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.strip() == "no conversations yet"
    r = history(data_dir, "show", "1")
    assert one_error_line(r) == "no conversation with id 1 (the history is empty)"


def test_export_to_a_path_that_cannot_be_written(data_dir, tmp_path):
    _good(data_dir / "history.db")
    target = tmp_path / "no such folder" / "sea.md"
    r = history(data_dir, "export", "1", "--out", str(target))
    assert one_error_line(r) == f"cannot write {target} (No such file or directory)"
    r = history(data_dir, "export", "1", "--out", str(tmp_path))
    assert one_error_line(r) == f"cannot write {tmp_path} (Is a directory)"
