"""Picking the next token and the branches it leaves, in the session and in the history store."""

from __future__ import annotations

import sqlite3

import pytest
from fakes.engines import ScriptedEngine

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession, PickError
from chatapp.engine.protocol import Finished, Token
from chatapp.history.schema import MIGRATIONS
from chatapp.history.store import SCHEMA_VERSION, Store, StoreError
from chatapp.sampling import SamplerSettings


def _session(tmp_path, **settings) -> tuple[ChatSession, ScriptedEngine, Store]:
    store = Store(tmp_path / "history.db")
    session = ChatSession(ChatHistory(store, pytest.fail), SamplerSettings(**settings))
    engine = ScriptedEngine(delay=0)
    session.attach(engine, engine.start())
    return session, engine, store


def _run(session: ChatSession, engine: ScriptedEngine, prefix: list[Token]) -> Finished:
    prepared = session.prepare(prefix)
    for event in engine.generate(prepared.request):
        if isinstance(event, Token):
            session.took([event])
        elif isinstance(event, Finished):
            session.finished(event)
            return event
    raise AssertionError("no finish event")


def test_picking_a_candidate_cuts_the_reply_there_and_keeps_the_old_one_as_a_branch(tmp_path):
    session, engine, store = _session(tmp_path, max_tokens=6)
    list(session.send("Hello"))
    first = session.tree.last.tokens
    assert [t.index for t in first] == list(range(6))
    other = first[2].candidates[3]  # not the token the sampler took at step 2
    assert other.id != first[2].id

    prefix = session.edits.pick(2, other)
    assert [t.id for t in prefix] == [first[0].id, first[1].id, other.id]
    assert prefix[-1].text == other.piece.decode() and prefix[-1].candidates == first[2].candidates
    assert session.conversation[-1].role == "user", "the old reply is set aside while streaming"
    _run(session, engine, prefix)

    request = engine.requests[-1]
    assert request.reply_prefix_ids == (first[0].id, first[1].id, other.id)
    assert [m.role for m in request.messages] == ["user"], "the old reply is not in the prompt"
    new = session.tree.last
    assert [t.id for t in new.tokens[:3]] == [first[0].id, first[1].id, other.id]
    assert session.edits.branch_points() == [1] and session.edits.branch_of(1) == (2, 2)

    # the store keeps both; the conversation goes on with the new one
    cid = session.history.conversation_id
    rows = store.messages(cid)
    assert [(m.role, m.branch, m.branches) for m in rows] == [("user", 1, 1), ("assistant", 2, 2)]
    assert rows[1].text == session.conversation[-1].content
    assert len(store.all_messages(cid)) == 3

    # switching back: the first reply is the conversation again, in memory and on disk
    assert session.edits.switch_branch(1, -1)
    assert not session.edits.switch_branch(1, -1), "there is no branch before the first"
    assert session.edits.branch_of(1) == (1, 2)
    assert session.tree.last.tokens == first
    assert store.messages(cid)[1].text == "".join(t.text for t in first)
    assert session.edits.switch_branch(1, +1) and session.edits.branch_of(1) == (2, 2)


def test_pick_at_any_step_and_its_limits(tmp_path):
    session, engine, _ = _session(tmp_path, max_tokens=4)
    with pytest.raises(PickError, match="made in this session"):
        session.edits.pick(0, _any_candidate())
    list(session.send("Hi"))
    last = session.tree.last.tokens
    with pytest.raises(PickError, match="no step 4"):
        session.edits.pick(4, last[0].candidates[1])
    prefix = session.edits.pick(0, last[0].candidates[1])  # the very first token of the reply
    assert [t.id for t in prefix] == [last[0].candidates[1].id]
    session.prepare(prefix)
    with pytest.raises(PickError, match="streaming"):
        session.edits.pick(0, last[0].candidates[2])
    session.failed("the worker died")  # what it wrote (the picked token) stays
    assert session.edits.branch_of(1) == (2, 2)


def test_a_reply_that_writes_nothing_gives_the_old_branch_back(tmp_path):
    session, engine, store = _session(tmp_path, max_tokens=3)
    list(session.send("Hi"))
    old = session.conversation[-1].content
    assert session.edits.set_aside_last_reply()
    session.prepare()
    session.failed("the server said no")
    assert session.conversation[-1].content == old
    assert store.messages(session.history.conversation_id)[-1].text == old


def test_later_turns_belong_to_their_branch(tmp_path):
    session, engine, store = _session(tmp_path, max_tokens=3)
    list(session.send("One"))
    first = session.tree.last.tokens
    _run(session, engine, session.edits.pick(1, first[1].candidates[2]))
    list(session.send("Two"))  # goes on from branch 2
    assert len(session.conversation) == 4
    assert session.edits.switch_branch(1, -1)
    assert [m.role for m in session.conversation] == ["user", "assistant"], "branch 1 ends here"
    list(session.send("Three"))  # a new turn after branch 1
    assert session.edits.switch_branch(1, +1)
    assert [m.content for m in session.conversation if m.role == "user"] == ["One", "Two"]

    # resume rebuilds the same tree and path from the store
    cid = session.history.conversation_id
    session.new_chat()
    conv, kept = session.resume(cid)
    assert [m.text for m in kept if m.role == "user"] == ["One", "Two"]
    assert session.edits.branch_points() == [1] and session.edits.branch_of(1) == (2, 2)
    assert session.edits.switch_branch(1, -1)
    assert [m.content for m in session.conversation if m.role == "user"] == ["One", "Three"]
    assert [m.text for m in store.messages(cid) if m.role == "user"] == ["One", "Three"]


def test_edit_and_continue_still_take_messages_out(tmp_path):
    session, engine, store = _session(tmp_path, max_tokens=3)
    list(session.send("One"))
    first = session.tree.last.tokens
    _run(session, engine, session.edits.pick(1, first[1].candidates[2]))
    assert session.edits.drop_last_reply()  # continue: the reply is replaced by its longer self
    _run(session, engine, list(first))
    assert session.edits.branch_of(1) == (2, 2)
    # edit: the turn goes, with every branch after it
    assert session.edits.take_last_user() == "One"
    cid = session.history.conversation_id
    assert session.conversation == [] and store.all_messages(cid) == []


def _any_candidate():
    from chatapp.engine.protocol import Candidate

    return Candidate(1, b"x", 0.5, 0.5)


# ---- the store ------------------------------------------------------------------------------


def test_store_branches_follow_the_chosen_path(tmp_path):
    with Store(tmp_path / "h.db") as store:
        cid = store.create_conversation("Branches")
        u = store.add_message(cid, "user", "Hi")
        a1 = store.begin_reply(cid)
        store.finish_reply(a1, "first")
        a2 = store.begin_reply(cid, parent_id=u)  # a second reply to the same turn
        store.finish_reply(a2, "second")
        u2 = store.add_message(cid, "user", "More")  # follows the chosen path: after a2
        assert [m.id for m in store.messages(cid)] == [u, a2, u2]
        assert [(m.branch, m.branches) for m in store.messages(cid)] == [(1, 1), (2, 2), (1, 1)]
        store.choose_branch(a1)
        assert [m.text for m in store.messages(cid)] == ["Hi", "first"]
        assert [m.chosen for m in store.all_messages(cid)] == [True, True, False, True]
        store.delete_messages([a1])  # the chosen one goes: the newest of the others is next
        assert [m.id for m in store.messages(cid)] == [u, a2, u2]
        store.delete_messages([u])  # a turn goes with everything that follows it
        assert store.all_messages(cid) == []
        with pytest.raises(StoreError, match="no message 999"):
            store.add_message(cid, "user", "x", parent_id=999)
        with pytest.raises(StoreError, match="no message with id 999"):
            store.choose_branch(999)


def test_a_schema_1_database_is_migrated_to_a_line_of_messages(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO conversations VALUES (1, 'Old', 1.0, 1.0, '', '', NULL)")
    for seq, (role, text) in enumerate([("user", "a"), ("assistant", "b"), ("user", "c")], 1):
        conn.execute(
            "INSERT INTO messages (conversation_id, seq, role, text, created, updated) "
            "VALUES (1, ?, ?, ?, 1.0, 1.0)",
            (seq, role, text),
        )
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
        msgs = store.messages(1)
        assert [m.text for m in msgs] == ["a", "b", "c"]
        assert [m.parent_id for m in msgs] == [None, msgs[0].id, msgs[1].id]
        new = store.add_message(1, "assistant", "d")
        assert store.messages(1)[-1].id == new and store.messages(1)[-1].parent_id == msgs[2].id


def test_history_show_and_export_give_the_chosen_branch_and_count_the_others(
    fresh_dirs, capsys
) -> None:
    import json

    from chatapp.commands.history import history_export, history_show

    with Store() as store:
        cid = store.create_conversation("Pick")
        u = store.add_message(cid, "user", "Hi")
        for text in ("old reply", "picked reply", "third reply"):
            store.finish_reply(store.begin_reply(cid, parent_id=u), text)
        store.choose_branch(store.all_messages(cid)[2].id)  # the second of three
    assert history_show(cid) == 0
    out = capsys.readouterr().out
    assert "2 messages (and 2 on other branches)" in out
    assert "assistant (branch 2 of 3):\n  picked reply" in out and "old reply" not in out
    assert history_export(cid, "md") == 0
    md = capsys.readouterr().out
    assert "## Assistant (branch 2 of 3)" in md and "- 2 more messages on other branches" in md
    assert history_export(cid, "json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["messages_on_other_branches"] == 2
    assert [(m["text"], m["branch"], m["branches"]) for m in data["messages"][1:]] == [
        ("picked reply", 2, 3)
    ]
