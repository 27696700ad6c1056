"""`chatapp history` and `chatapp config` command functions on a real history database."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.commands.config import config_path, config_show
from chatapp.commands.history import (
    history_delete,
    history_export,
    history_list,
    history_show,
)
from chatapp.history.records import Conversation, Message
from chatapp.history.store import Store, StoreError, default_db_path, model_fingerprint
from chatapp.metrics import GenerationStats
from chatapp.sampling import PRESETS

pytestmark = pytest.mark.usefixtures("fresh_dirs")


@pytest.fixture
def conversation(tmp_path: Path) -> int:
    model = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 4096)
    stats = GenerationStats(
        prompt_tokens=35, prompt_evaluated=35, completion_tokens=21, ttft_s=0.0734,
        prefill_s=0.175, decode_s=0.25, n_past=56, n_ctx=4096,
    )  # fmt: skip
    with Store() as store:
        cid = store.create_conversation("Sky colour", system_prompt="Be brief.")
        store.add_message(cid, "user", "Why is the sky blue?")
        rid = store.begin_reply(cid, model=model_fingerprint(model), sampler=PRESETS["precise"])
        store.finish_reply(rid, "Rayleigh scattering.", stats=stats, stop_reason="eog")
        store.add_message(cid, "user", "More?")
        rid = store.begin_reply(cid, model=model_fingerprint(model))
        store.update_reply(rid, "Shorter wave")
        store.finish_reply(rid, "Shorter wave", "interrupted", stop_reason="cancelled")
        return cid


def test_list_empty_does_not_create_a_database(capsys) -> None:
    assert history_list() == 0
    out, err = capsys.readouterr()
    assert out == "" and "no conversations yet" in err
    assert history_list(as_json=True) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not default_db_path().exists()
    with pytest.raises(StoreError, match="no conversation with id 1"):
        history_show(1)


def test_list_and_show(conversation: int, capsys) -> None:
    assert history_list() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "UPDATED", "MSGS", "TITLE"]
    assert out[1].split()[0] == str(conversation) and out[1].endswith("4  Sky colour")
    assert history_list(as_json=True) == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["title"] == "Sky colour" and item["message_count"] == 4

    assert history_show(conversation) == 0
    out = capsys.readouterr().out
    assert "system: Be brief." in out and "  Why is the sky blue?" in out
    assert "SmolLM2-135M-Instruct.Q4_1.gguf Q4_1 · TTFT 73 ms · prefill 200 t/s" in out
    assert "assistant [interrupted]:" in out
    with pytest.raises(StoreError, match="no conversation with id 99"):
        history_show(99)


def test_export_markdown_has_a_stats_footer(conversation: int, capsys, tmp_path: Path) -> None:
    assert history_export(conversation, "md") == 0
    md = capsys.readouterr().out
    assert md.startswith("# Sky colour\n")
    assert "## User\n\nWhy is the sky blue?" in md
    assert "## Assistant\n\nRayleigh scattering." in md
    assert "> model: `SmolLM2-135M-Instruct.Q4_1.gguf` (Q4_1, 0.0 MB, header sha256 " in md
    assert "> TTFT 73 ms · prefill 200 t/s · decode 80.0 t/s" in md
    assert "> tokens: 35 prompt, 21 completion" in md
    assert "> stop reason: eog" in md
    assert "> sampler: temperature=0.3, top_k=20, top_p=0.9, min_p=0.1" in md
    assert "## Assistant (interrupted)\n\nShorter wave" in md
    assert "> stop reason: cancelled" in md

    out = tmp_path / "chat.md"
    assert history_export(conversation, "md", out) == 0
    assert out.read_text() == md
    with pytest.raises(StoreError, match="md or json"):
        history_export(conversation, "html")
    with pytest.raises(StoreError, match="cannot write"):
        history_export(conversation, "md", tmp_path / "no" / "such" / "dir.md")


def test_export_json_round_trips(conversation: int, capsys) -> None:
    assert history_export(conversation, "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "chatapp-conversation" and data["version"] == 1
    with Store() as store:
        assert Conversation.from_dict(data["conversation"]) == store.get_conversation(conversation)
        messages = [Message.from_dict(m) for m in data["messages"]]
        assert messages == store.messages(conversation)
    assert messages[1].stats["prefill_s"] == 0.175 and messages[1].sampler == PRESETS["precise"]


def test_delete(conversation: int, capsys) -> None:
    with pytest.raises(StoreError, match="without --yes"):
        history_delete(conversation, yes=False, stdin=io.StringIO("y\n"))

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert history_delete(conversation, yes=False, stdin=Tty("n\n")) == 1
    assert "Delete #1 'Sky colour' (4 messages)? [y/N]" in capsys.readouterr().out
    assert history_delete(conversation, yes=False, stdin=Tty("y\n")) == 0
    with pytest.raises(StoreError, match="no conversation"):
        history_delete(conversation, yes=True)
    with Store() as store:
        assert store.list_conversations() == []


def test_config_path_and_show(capsys) -> None:
    assert config_path() == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(paths.config_file()) and "no config file yet" in err
    assert config_show() == 0
    out = capsys.readouterr().out
    assert "(not found, defaults)" in out and "[sampler]\ntemperature = 0.8" in out

    paths.config_file().parent.mkdir(parents=True)
    paths.config_file().write_text("n_ctx = 5\ntheme = 'nord'\n")
    assert config_show() == 1
    out, err = capsys.readouterr()
    assert 'theme = "nord"' in out and "n_ctx = 4096" in out
    assert err == "warning: config.toml: n_ctx must be between 16 and 4194304, got 5\n"
