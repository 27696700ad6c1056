"""Attached files: read as text or refused in one sentence, fenced blocks headed by their names,
kept in the history (a schema migration) and shown by `history export`; `ask --file`."""

from __future__ import annotations

import io
import json
import os
import pty
import sqlite3
import subprocess
import sys

import pytest
from helpers import REPO, one_error_line, run_cli

from chatapp.chat.attachments import (
    ANY_CONTEXT,
    Attachment,
    AttachmentError,
    byte_limit,
    compose,
    fit_problem,
    longest_token_bytes,
    read_attachment,
    split_file_lines,
)
from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.commands.history import _markdown, export_data
from chatapp.history.schema import MIGRATIONS, SCHEMA_VERSION
from chatapp.history.store import Store

pytestmark = pytest.mark.usefixtures("fresh_dirs")


def test_text_files_become_fenced_blocks_headed_by_their_names(tmp_path):
    code = tmp_path / "add.py"
    code.write_text("def add(a, b):\n    return a - b\n")
    notes = tmp_path / "notes.md"
    notes.write_text("Some text\n```sh\nls\n```\n")  # a fence inside: the block's is longer
    files = [read_attachment(str(code)), read_attachment(str(notes))]
    assert files[0].size_bytes == code.stat().st_size
    text = compose("Is there a bug?", files)
    assert text.startswith("Is there a bug?\n\n" + f"{code}\n```python\ndef add")
    assert f"{notes}\n````markdown\nSome text\n```sh\nls\n```\n````" in text
    stdin = read_attachment("-", stdin=io.BytesIO(b"a,b\n1,2"))
    assert stdin.name == "stdin" and stdin.block() == "stdin\n```\na,b\n1,2\n```"


@pytest.mark.parametrize(
    "content,words",
    [
        (b"\x7fELF\x02\x01\x00\x00binary", "is a binary file (14 bytes)"),
        (b"caf\xe9 latin-1", "is not UTF-8 text (byte 3 of 12)"),
    ],
)
def test_a_binary_or_undecodable_file_is_one_sentence(tmp_path, content, words):
    path = tmp_path / "data.bin"
    path.write_bytes(content)
    with pytest.raises(AttachmentError) as err:
        read_attachment(str(path))
    assert words in str(err.value) and "nothing was sent" in str(err.value)
    with pytest.raises(AttachmentError, match="does not exist"):
        read_attachment(str(tmp_path / "missing.txt"))
    with pytest.raises(AttachmentError, match="is a folder"):
        read_attachment(str(tmp_path))


def test_file_lines_and_the_fit_sentence():
    assert split_file_lines("/file a.py\nreview this\n/file 'b c.md'") == (
        "review this",
        ["a.py", "b c.md"],
    )
    assert fit_problem(1000, 2048, 512) == ""
    assert fit_problem(1700, 2048, 512) == (
        "the message is 1,700 tokens and the reply needs 512, but the context holds 2,048; "
        "attach less (or /trim: send only the start of the files), or load the model with a "
        "larger --ctx"
    )


def test_the_history_keeps_what_was_attached_and_export_shows_it():
    store = Store()
    session = ChatSession(ChatHistory(store, print))
    files = [Attachment("log.txt", "boot ok\n", 8, 5)]
    session.add_user("What happened?", files)
    cid = session.history.conversation_id
    conv, messages = store.get_conversation(cid), store.messages(cid)
    (user,) = messages
    assert user.attachments == (
        {"name": "log.txt", "text": "boot ok\n", "size_bytes": 8, "tokens": 5},
    )
    assert user.text == "What happened?\n\nlog.txt\n```\nboot ok\n```"
    assert session.conversation[0].content == user.text  # what the model reads
    assert "> attached: `log.txt` (8 bytes, 5 tokens)" in _markdown(conv, messages)
    data = json.loads(json.dumps(export_data(conv, messages)))
    assert data["messages"][0]["attachments"][0]["text"] == "boot ok\n"


def test_an_older_database_gains_the_attachments_column(fresh_dirs):
    path = fresh_dirs / "old.db"
    conn = sqlite3.connect(path)
    for step in MIGRATIONS[:2]:
        for statement in step:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO conversations (title, created, updated) VALUES ('t', 0, 0)")
    conn.execute(
        "INSERT INTO messages (conversation_id, seq, role, text, created, updated) "
        "VALUES (1, 1, 'user', 'hi', 0, 0)"
    )
    conn.commit()
    conn.close()
    store = Store(path)
    assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    (old,) = store.messages(1)
    assert old.text == "hi" and old.attachments == ()


@pytest.mark.slow
def test_ask_file_from_a_pipe_and_refusals(tmp_path):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}
    piped = subprocess.run(
        [sys.executable, "-m", "chatapp.cli", "ask", "Repeat the word in the file.", "--file",
         "-", "--temperature", "0", "--max-tokens", "20", "--json"],
        input="pelican\n", capture_output=True, text=True, timeout=120, env=env,
        cwd=REPO,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["prompt_tokens"] > 20
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02")
    assert "blob.bin is a binary file" in one_error_line(run_cli("ask", "x", "--file", str(binary)))
    big = tmp_path / "big.txt"
    big.write_text("\n".join(str(i) for i in range(3000)))
    r = run_cli("ask", "x", "--file", str(big), "--ctx", "1024")
    assert "but the context holds 1,024" in one_error_line(r, code=2)


def test_ask_file_stdin_from_a_terminal_says_it_waits_for_ctrl_d():
    """With a terminal on stdin, `ask --file -` waited with no word. Now it says so on stderr
    first; what is typed until Ctrl-D is the file (here a NUL byte: refused before loading)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "chatapp.cli", "ask", "What is this?", "--file", "-"],
        stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
    )  # fmt: skip
    os.close(follower)
    try:
        first = proc.stderr.readline().decode()
        assert first.startswith("note: reading the file from the terminal until Ctrl-D"), first
        assert proc.poll() is None  # it waits for the file, having said so
        os.write(leader, b"\x00 not text\n\x04")
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        os.close(leader)
    assert "Traceback" not in err.decode()
    assert err.decode().strip() == "error: stdin is a binary file (11 bytes); nothing was sent"
    assert proc.returncode == 1


def test_a_file_past_the_byte_bound_is_refused_from_its_size_unread(tmp_path, model_path):
    """The bound: every token holds at most the vocabulary's longest token's bytes, so a file
    of more bytes than room * longest cannot fit. Checked on a sparse 5 GB file: reading it
    would have found NUL bytes ("binary"), not its size."""
    longest = longest_token_bytes(model_path)
    assert longest is not None and 8 <= longest <= 1024
    limit = byte_limit(2048, 512, longest)
    assert limit.max_bytes == 1536 * longest
    huge = tmp_path / "huge.log"
    with huge.open("wb") as fh:
        fh.truncate(5_000_000_000)
    with pytest.raises(AttachmentError) as err:
        read_attachment(str(huge), limit=limit)
    assert str(err.value).startswith(
        f"{huge} is 5,000,000,000 bytes, more than the 1,536 tokens a message may take in this "
        f"context can hold (each token holds at most {longest} bytes with this model)"
    )
    assert byte_limit(2048, 512, None) == ANY_CONTEXT  # no vocabulary known: only the 4 MB cap
    assert longest_token_bytes(str(huge)) is None  # not a GGUF file


def test_the_byte_bound_holds_on_the_real_tokenizer(engine, model_path):
    """No text packs more bytes into a token than the bound assumes (runs that merge into the
    longest tokens included)."""
    longest = longest_token_bytes(model_path)
    for text in (" " * 4000, "=" * 4000, "\n" * 4000, "-" * 4000, "ab" * 2000, "é" * 2000):
        block = Attachment("f.txt", text, len(text.encode())).block()
        tokens = len(engine.tokenize(block, special=False))
        assert tokens * longest >= len(block.encode()), (text[:3], tokens, longest)


def test_a_path_with_a_nul_is_one_sentence():
    from chatapp.chat.attachments import AttachmentError, read_attachment

    with pytest.raises(AttachmentError, match=r"holds a NUL character\); nothing was sent"):
        read_attachment("/tmp/a\x00b.txt")
