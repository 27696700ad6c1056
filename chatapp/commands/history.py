"""`chatapp history ...`: plain functions that print and return a code."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from chatapp.chat.thinking import split_reply
from chatapp.history.store import (
    SCHEMA_VERSION,
    Conversation,
    Message,
    MessageStatus,
    Store,
    StoreError,
    default_db_path,
)
from chatapp.stats_text import speed_parts, stop_text
from chatapp.textsafe import for_stream

EXPORT_FORMAT = "chatapp-conversation"
EXPORT_VERSION = 1


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _open(read_only: bool) -> Store | None:
    """The history store, or None when no database has been written yet."""
    path = default_db_path()
    if not path.exists() or _empty_file(path):
        return None
    return Store(path, read_only=read_only)


def _empty_file(path: Path) -> bool:
    """A 0-byte database (created, never written, e.g. by `touch`) is an empty history."""
    wal = path.with_name(path.name + "-wal")
    try:
        return path.stat().st_size == 0 and (not wal.exists() or wal.stat().st_size == 0)
    except OSError:
        return False


def _say(text: str) -> None:
    """Print to stdout: saved text (titles, messages, files) with control characters made
    visible on a terminal, so none can set its title, write its clipboard or clear it."""
    print(for_stream(sys.stdout)(text))


def _get(conversation_id: int) -> tuple[Conversation, list[Message]]:
    store = _open(read_only=True)
    if store is None:
        raise StoreError(f"no conversation with id {conversation_id} (the history is empty)")
    with store:
        return store.get_conversation(conversation_id), store.messages(conversation_id)


def history_list(as_json: bool = False, limit: int | None = None) -> int:
    """Print the conversations, newest first (id, last change, messages, title)."""
    store = _open(read_only=True)
    conversations = []
    if store is not None:
        with store:
            conversations = store.list_conversations(limit)
    if as_json:
        _say(json.dumps([c.to_dict() for c in conversations], indent=2, ensure_ascii=False))
        return 0
    if not conversations:
        print("no conversations yet", file=sys.stderr)
        return 0
    _say(f"{'ID':>5}  {'UPDATED':<16}  {'MSGS':>4}  TITLE")
    for c in conversations:
        _say(f"{c.id:>5}  {_when(c.updated):<16}  {c.message_count:>4}  {c.title}")
    return 0


def history_show(conversation_id: int) -> int:
    """Print one conversation as plain text, with a stats line under each reply."""
    conversation, messages = _get(conversation_id)
    _say(f"#{conversation.id} {conversation.title}")
    others = _others(conversation, messages)
    _say(f"created {_when(conversation.created)}, {len(messages)} messages{others}")
    if conversation.system_prompt:
        _say(f"\nsystem: {conversation.system_prompt}")
    for m in messages:
        mark = "" if m.status is MessageStatus.COMPLETE else f" [{m.status.value}]"
        _say(f"\n{m.role}{mark}{_branch(m)}:")
        _say("\n".join("  " + line for line in (m.text or "").splitlines()) or "  (empty)")
        if m.role == "assistant":
            facts = _stats_facts(m)
            if facts:
                _say("  (" + " · ".join(facts) + ")")
    return 0


def _others(conversation: Conversation, messages: list[Message]) -> str:
    """How many stored messages are on other branches than the one shown."""
    others = conversation.message_count - len(messages)
    return f" (and {others} on other branches)" if others > 0 else ""


def _branch(m: Message) -> str:
    """Which branch a message is, when it has others (the chosen one is shown)."""
    return f" (branch {m.branch} of {m.branches})" if m.branches > 1 else ""


def _stats_facts(m: Message) -> list[str]:
    """Short facts about how a reply was made, in display order."""
    facts: list[str] = []
    if m.model:
        name = Path(m.model.path).name or m.model.path
        facts.append(f"{name} {m.model.quant}".strip())
    facts += speed_parts(m.ttft_s, m.prefill_tps, m.decode_tps)
    if m.prompt_tokens is not None or m.completion_tokens is not None:
        facts.append(f"{m.prompt_tokens or 0} prompt + {m.completion_tokens or 0} reply tokens")
    if m.stop_reason:
        facts.append(stop_text(m.stop_reason))
    if m.error:
        facts.append(f"error: {m.error}")
    return facts


def _markdown(conversation: Conversation, messages: list[Message]) -> str:
    out = [f"# {conversation.title}", "", f"- created: {_when(conversation.created)}"]
    others = conversation.message_count - len(messages)
    if others > 0:
        out.append(f"- {others} more messages on other branches (the chosen ones are shown)")
    if conversation.model_path:
        out.append(f"- model: `{conversation.model_path}`")
    if conversation.system_prompt:
        out += ["", "## System", "", conversation.system_prompt]
    for m in messages:
        status = "" if m.status is MessageStatus.COMPLETE else f" ({m.status.value})"
        out += ["", f"## {m.role.capitalize()}{status}{_branch(m)}", ""]
        split = split_reply(m.text or "") if m.role == "assistant" else None
        if split and split.thinking:  # a thinking model: its reasoning folded, then the answer
            out += ["<details><summary>Thinking</summary>", "", split.thinking.strip(), "",
                    "</details>", ""]  # fmt: skip
            out.append(split.answer or "*(no answer: the reply ended while thinking)*")
        else:
            out.append(m.text or "*(empty)*")
        if m.attachments:  # (their text is in the message, as the model read it)
            out += ["", "> attached: " + " · ".join(_attached(a) for a in m.attachments)]
        if m.role == "assistant":
            out += ["", *_markdown_footer(m)]
    return "\n".join(out).rstrip() + "\n"


def _attached(file: dict) -> str:
    tokens = f", {file['tokens']:,} tokens" if file.get("tokens") is not None else ""
    return f"`{file['name']}` ({file['size_bytes']:,} bytes{tokens})"


def _markdown_footer(m: Message) -> list[str]:
    """The stats footer of one reply, as a Markdown quote."""
    rows: list[str] = []
    if m.model:
        size = f", {m.model.size / 1e6:.1f} MB" if m.model.size else ""
        sha = f", header sha256 {m.model.sha256[:12]}" if m.model.sha256 else ""
        rows.append(f"model: `{Path(m.model.path).name}` ({m.model.quant or '?'}{size}{sha})")
    speed = speed_parts(m.ttft_s, m.prefill_tps, m.decode_tps)
    if speed:
        rows.append(" · ".join(speed))
    if m.prompt_tokens is not None or m.completion_tokens is not None:
        rows.append(f"tokens: {m.prompt_tokens or 0} prompt, {m.completion_tokens or 0} completion")
    if m.stop_reason:
        rows.append(f"stop reason: {m.stop_reason}")
    if m.error:
        rows.append(f"error: {m.error}")
    if m.sampler:
        rows.append("sampler: " + ", ".join(f"{k}={v}" for k, v in m.sampler.to_dict().items()))
    return ["> " + row + ("  " if i < len(rows) - 1 else "") for i, row in enumerate(rows)]


def export_data(conversation: Conversation, messages: list[Message]) -> dict[str, Any]:
    """Everything about a conversation as JSON-able data (the `--format json` export): the
    messages of the chosen branches, each saying which branch it is of how many."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "schema": SCHEMA_VERSION,
        "conversation": conversation.to_dict(),
        "messages": [_message_data(m) for m in messages],
        "messages_on_other_branches": conversation.message_count - len(messages),
    }


def _message_data(m: Message) -> dict[str, Any]:
    """A message as data; a thinking model's reply also has its reasoning and answer apart
    (`text` stays the whole reply, as stored)."""
    data = m.to_dict()
    if m.role == "assistant":
        split = split_reply(m.text or "")
        if split.thinking:
            data["thinking"], data["answer"] = split.thinking, split.answer
    return data


def history_export(conversation_id: int, fmt: str = "md", out: Path | None = None) -> int:
    """Write one conversation as Markdown (with a stats footer per reply) or JSON."""
    if fmt not in ("md", "json"):
        raise StoreError(f"export format must be md or json, got {fmt!r}")
    conversation, messages = _get(conversation_id)
    if fmt == "md":
        text = _markdown(conversation, messages)
    else:
        data = export_data(conversation, messages)
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if out is None:
        sys.stdout.write(for_stream(sys.stdout)(text))
        return 0
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StoreError(f"cannot write {out} ({exc.strerror or exc})") from None
    print(f"wrote {out}", file=sys.stderr)
    return 0


def history_delete(conversation_id: int, yes: bool = False, stdin: TextIO | None = None) -> int:
    """Delete a conversation; asks first unless `yes` (refuses when stdin is not a terminal)."""
    store = _open(read_only=False)
    if store is None:
        raise StoreError(f"no conversation with id {conversation_id} (the history is empty)")
    with store:
        conversation = store.get_conversation(conversation_id)
        if not yes:
            stdin = stdin or sys.stdin
            if not stdin.isatty():
                raise StoreError("not deleting without --yes (standard input is not a terminal)")
            print(
                f"Delete #{conversation.id} {conversation.title!r} "
                f"({conversation.message_count} messages)? [y/N] ",
                end="",
                flush=True,
            )
            if stdin.readline().strip().lower() not in ("y", "yes"):
                print("not deleted", file=sys.stderr)
                return 1
        store.delete(conversation_id)
    print(f"deleted conversation {conversation_id}", file=sys.stderr)
    return 0
