"""The SQLite history on real files: round trips, crashes, two writers, bad dirs, newer schemas."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chatapp.gguf.header import quant_name
from chatapp.history.store import (
    SCHEMA_VERSION,
    MessageStatus,
    ModelFingerprint,
    Store,
    StoreError,
    default_db_path,
    model_fingerprint,
    title_from,
)
from chatapp.metrics import GenerationStats
from chatapp.sampling import PRESETS

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("fresh_dirs")


def _child(code: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


STATS = GenerationStats(
    prompt_tokens=35,
    prompt_evaluated=30,
    completion_tokens=120,
    ttft_s=0.125,
    prefill_s=0.15,
    decode_s=1.4,
    n_past=155,
    n_ctx=4096,
)


def test_round_trip_with_stats(tmp_path: Path) -> None:
    model = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 5000)
    fp = model_fingerprint(model)
    assert fp.quant == "Q4_1" and fp.size == model.stat().st_size
    assert fp.sha256 == hashlib.sha256(model.read_bytes()[: 1 << 20]).hexdigest()

    with Store() as store:
        assert store.path == default_db_path()
        cid = store.create_conversation(
            "Sky", system_prompt="Be brief.", model_path=str(model), sampler=PRESETS["precise"]
        )
        uid = store.add_message(cid, "user", "Why is the sky blue?")
        rid = store.begin_reply(cid, model=fp, sampler=PRESETS["precise"])
        store.update_reply(rid, "Rayleigh")
        store.finish_reply(
            rid, "Rayleigh scattering.", stats=STATS, stop_reason="eog", sampler=PRESETS["greedy"]
        )

    with Store() as store:  # a fresh connection reads everything back
        conv = store.get_conversation(cid)
        assert (conv.title, conv.system_prompt, conv.message_count) == ("Sky", "Be brief.", 2)
        assert conv.sampler == PRESETS["precise"]
        user, reply = store.messages(cid)
        assert (user.id, user.seq, user.role, user.status) == (uid, 1, "user", "complete")
        assert reply.id == rid and reply.seq == 2 and reply.text == "Rayleigh scattering."
        assert reply.status is MessageStatus.COMPLETE
        assert reply.model == fp
        assert reply.sampler == PRESETS["greedy"]  # the settings at the end of the reply
        assert reply.ttft_s == 0.125 and reply.prompt_tokens == 35
        assert reply.completion_tokens == 120 and reply.stop_reason == "eog"
        assert reply.prefill_tps == pytest.approx(200.0)
        assert reply.decode_tps == pytest.approx(85.0)
        assert reply.stats == STATS.to_dict()
        chat = store.chat_messages(cid)
        assert [(m.role, m.content) for m in chat] == [
            ("system", "Be brief."),
            ("user", "Why is the sky blue?"),
            ("assistant", "Rayleigh scattering."),
        ]


def test_reply_row_exists_while_streaming() -> None:
    with Store() as store, Store(read_only=True) as reader:
        cid = store.create_conversation()
        store.add_message(cid, "user", "hi")
        rid = store.begin_reply(cid)
        row = reader.messages(cid)[-1]
        assert (row.id, row.status, row.text) == (rid, MessageStatus.STREAMING, "")
        store.update_reply(rid, "Hel")
        assert reader.messages(cid)[-1].text == "Hel"
        # our own live reply is not "interrupted" by a second window opening the store
        assert store.mark_interrupted_on_start() == 0
        assert reader.messages(cid)[-1].status is MessageStatus.STREAMING


def test_list_rename_delete_search() -> None:
    with Store() as store:
        a = store.create_conversation("first")
        store.add_message(a, "user", "tell me about 100% pure Python_code")
        b = store.create_conversation("second")
        store.add_message(b, "user", "hello")
        store.add_message(b, "assistant", "Hello there")
        assert [c.id for c in store.list_conversations()] == [b, a]
        assert [c.message_count for c in store.list_conversations()] == [2, 1]
        store.rename(a, "  renamed ")
        assert [c.title for c in store.list_conversations()] == ["renamed", "second"]
        with pytest.raises(StoreError, match="empty"):
            store.rename(a, " ")

        hits = store.search("HELLO")
        assert {(h.conversation_id, h.role) for h in hits} == {(b, "user"), (b, "assistant")}
        assert [h.message_id is None for h in store.search("renamed")] == [True]
        assert len(store.search("100% pure")) == 1
        assert store.search("0%_p") == []  # % and _ are literal
        assert len(store.search("python_code")) == 1
        for i in range(5):
            store.add_message(a, "assistant", f"hello again {i}")
        assert [h.snippet for h in store.search("hello again", limit=2)] == [
            "hello again 4",
            "hello again 3",
        ]  # newest first, stops at the limit

        store.delete(b)
        assert [c.id for c in store.list_conversations()] == [a]
        orphans = store._conn.execute(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (b,)
        ).fetchone()[0]
        assert orphans == 0
        for call in (lambda: store.delete(b), lambda: store.get_conversation(b)):
            with pytest.raises(StoreError, match=f"no conversation with id {b}"):
                call()
        with pytest.raises(StoreError, match="no conversation"):
            store.add_message(b, "user", "x")


WRITER = """
import sys, time
from chatapp.history.store import Store
store = Store()
cid = store.create_conversation("crash")
store.add_message(cid, "user", "count to a million")
rid = store.begin_reply(cid)
text = ""
for i in range(100000):
    text += f"{i} "
    store.update_reply(rid, text)
    if i == 5:
        print(cid, rid, flush=True)
    time.sleep(0.05)
"""


def test_sigkill_mid_reply_keeps_user_turn_and_partial_reply() -> None:
    child = _child(WRITER)
    cid, rid = map(int, child.stdout.readline().split())
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL

    with Store() as store:
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        user, reply = store.messages(cid)
        assert (user.role, user.text) == ("user", "count to a million")
        assert reply.id == rid and reply.status is MessageStatus.STREAMING
        assert reply.text.startswith("0 1 2 3 4 5 ")
        assert store.mark_interrupted_on_start() == 1
        assert store.messages(cid)[1].status is MessageStatus.INTERRUPTED
        assert store.messages(cid)[1].text == reply.text
        assert store.mark_interrupted_on_start() == 0


HAMMER = """
import os, sys, time
from chatapp.history.store import Store
store = Store(busy_timeout_ms=int(os.environ.get("TIMEOUT_MS", "5000")))
cid = 1
print("ready", flush=True)
sys.stdin.readline()
barrier = os.environ["BARRIER"]  # both processes are running before either starts writing
open(os.path.join(barrier, str(os.getpid())), "w").close()
while len(os.listdir(barrier)) < 2:
    time.sleep(0.001)
t0 = time.time()
for i in range(200):
    rid = store.begin_reply(cid)
    store.update_reply(rid, "partial")
    store.finish_reply(rid, f"{os.getpid()} {i}", stop_reason="eog")
print("done", t0, time.time(), flush=True)
"""


def _start_together(script: str, n: int = 2, **env: str) -> list[subprocess.Popen[str]]:
    children = [_child(script, **env) for _ in range(n)]
    for child in children:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    return children


def test_two_processes_writing_at_once_never_see_locked(tmp_path: Path) -> None:
    with Store() as store:
        cid = store.create_conversation("shared")
    (tmp_path / "barrier").mkdir()
    children = _start_together(HAMMER, BARRIER=str(tmp_path / "barrier"))
    results = [c.communicate(timeout=120) for c in children]
    for child, (out, err) in zip(children, results, strict=True):
        assert "locked" not in err
        assert child.returncode == 0, err
        assert out.split()[0] == "done"
    # the two loops ran at the same time (with busy_timeout_ms=0 one of them fails "locked")
    (a0, a1), (b0, b1) = [map(float, out.split()[1:]) for out, _ in results]
    assert min(a1, b1) > max(a0, b0)
    with Store() as store:
        rows = store.messages(cid)
        assert len(rows) == 400
        assert [m.seq for m in rows] == list(range(1, 401))
        assert all(m.status is MessageStatus.COMPLETE for m in rows)
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


FRESH = """
import sys
from chatapp.history.store import Store
print("ready", flush=True)
sys.stdin.readline()
store = Store()  # both open (and migrate) a database that does not exist yet
cid = store.create_conversation()
for i in range(200):
    store.add_message(cid, "user", str(i))
"""


def test_two_processes_creating_a_fresh_database_at_once() -> None:
    children = _start_together(FRESH)
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    with Store() as store:
        assert [c.message_count for c in store.list_conversations()] == [200, 200]


def test_missing_data_dir_is_created(tmp_path: Path) -> None:
    with Store() as store:
        assert store.path.parent == tmp_path / "data"
        assert store.path.is_file()
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_uncreatable_data_dir_names_the_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "afile").write_text("not a directory")
    bad = tmp_path / "afile" / "sub"
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(bad))
    with pytest.raises(StoreError, match="cannot create the data directory") as err:
        Store()
    assert str(bad) in str(err.value) and "CHATAPP_DATA_DIR" in str(err.value)


def test_read_only_database_gives_a_clear_error() -> None:
    with Store() as store:
        cid = store.create_conversation("kept")
    with Store(read_only=True) as ro:
        assert ro.get_conversation(cid).title == "kept"
        with pytest.raises(StoreError, match="is read-only"):
            ro.add_message(cid, "user", "lost?")
    with pytest.raises(StoreError, match="no history database"):
        Store(Path(default_db_path()).with_name("absent.db"), read_only=True)


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr")
def test_immutable_database_file_gives_a_clear_error() -> None:
    """chattr +i stops root too (chmod does not); skipped where the filesystem has no flags."""
    path = default_db_path()
    with Store() as store:
        cid = store.create_conversation("kept")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        with Store() as store:
            with pytest.raises(StoreError, match="is read-only"):
                store.add_message(cid, "user", "lost?")
            assert store.messages(cid) == []
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_disk_full_raises_and_keeps_the_earlier_data() -> None:
    with Store() as store:
        cid = store.create_conversation()
        store.add_message(cid, "user", "small")
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL
        with pytest.raises(StoreError, match="disk is full"):
            store.add_message(cid, "user", "x" * 100_000)
        assert [m.text for m in store.messages(cid)] == ["small"]


def test_database_deleted_while_running() -> None:
    store = Store()
    cid = store.create_conversation()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreError, match="was deleted while chatapp was running"):
        store.add_message(cid, "user", "hello")
    store.close()
    with Store() as fresh:  # the UI can start a new history file and save its conversation again
        assert fresh.list_conversations() == []


def test_newer_schema_is_refused_and_left_byte_identical() -> None:
    path = default_db_path()
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE future (x)")
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(StoreError) as err:
            Store(read_only=read_only)
        assert "written by a newer chatapp (schema 999, this one knows" in str(err.value)
        assert "CHATAPP_DATA_DIR" in str(err.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["history.db"]


def test_not_a_database(tmp_path: Path) -> None:
    path = default_db_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"hello, I am a text file that is long enough to be a header" * 10)
    with pytest.raises(StoreError, match="not a valid chatapp history database"):
        Store()


def test_fingerprint_is_cached_and_follows_changes(tmp_path: Path) -> None:
    model = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    model.write_bytes(b"a" * 100)
    first = model_fingerprint(model)
    assert first.quant == "Q4_K_M"
    assert model_fingerprint(model) is first  # cached
    assert model_fingerprint(model, quant="Q8_0").quant == "Q8_0"
    model.write_bytes(b"b" * 200)
    second = model_fingerprint(model)
    assert second.size == 200 and second.sha256 != first.sha256
    with pytest.raises(StoreError, match="cannot read the model file"):
        model_fingerprint(tmp_path / "missing.gguf")
    assert quant_name(None, "x.gguf") == "" and quant_name(None, "m-F16.gguf") == "F16"


def test_failed_reply_and_remote_model() -> None:
    with Store() as store:
        cid = store.create_conversation()
        store.add_message(cid, "user", "hi")
        rid = store.begin_reply(cid, model=ModelFingerprint("qwen2.5:0.5b"))
        store.finish_reply(rid, "", "error", stop_reason="error", error="the server went away")
        reply = store.messages(cid)[-1]
        assert reply.status is MessageStatus.ERROR and reply.error == "the server went away"
        assert reply.model == ModelFingerprint("qwen2.5:0.5b")
        assert [m.role for m in store.chat_messages(cid)] == ["user"]  # failed reply left out
        with pytest.raises(StoreError, match="final status"):
            store.finish_reply(rid, "", "streaming")
        with pytest.raises(StoreError, match="no message"):
            store.update_reply(10_000, "x")


def test_title_from() -> None:
    assert title_from("\n  Why is   the sky blue?\nmore") == "Why is the sky blue?"
    assert len(title_from("x" * 500)) == 60
    assert title_from("   ") == "New chat"
