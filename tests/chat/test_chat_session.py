"""The chat session without a terminal: turns, history rows, edits and context fitting."""

from __future__ import annotations

import pytest
from fakes.engines import ScriptedEngine

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.engine.protocol import EngineError, Failed, Finished, LoadOptions, Token
from chatapp.history.records import MessageStatus
from chatapp.history.store import Store
from chatapp.sampling import SamplerSettings


def _session(tmp_path, engine=None, **settings) -> tuple[ChatSession, Store]:
    store = Store(tmp_path / "history.db")
    warnings: list[str] = []
    session = ChatSession(ChatHistory(store, warnings.append), SamplerSettings(**settings))
    engine = engine or ScriptedEngine(delay=0)
    session.attach(engine, engine.start())
    return session, store


def _rows(store: Store, session: ChatSession) -> list[tuple[str, str, MessageStatus]]:
    cid = session.history.conversation_id
    return [(m.role, m.text, m.status) for m in store.messages(cid)]


def test_send_keeps_the_turns_and_saves_both_rows(tmp_path):
    session, store = _session(tmp_path, max_tokens=4)
    events = list(session.send("Hello"))
    assert isinstance(events[-1], Finished) and sum(isinstance(e, Token) for e in events) == 4
    assert [m.role for m in session.conversation] == ["user", "assistant"]
    assert session.conversation[1].content == " The sea is calm"
    assert _rows(store, session) == [
        ("user", "Hello", MessageStatus.COMPLETE),
        ("assistant", " The sea is calm", MessageStatus.COMPLETE),
    ]
    assert not session.streaming


def test_the_request_carries_the_system_prompt_settings_and_stop_strings(tmp_path):
    engine = ScriptedEngine(delay=0)
    session, _ = _session(tmp_path, engine, max_tokens=2, temperature=0.0)
    session.set_system_prompt("Be brief.")
    session.stop = ("\n\n",)
    list(session.send("Hi"))
    request = engine.requests[-1]
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "Be brief."),
        ("user", "Hi"),
    ]
    assert request.settings.temperature == 0.0 and request.stop == ("\n\n",)


def test_regenerate_continue_and_edit_replace_the_stored_rows(tmp_path):
    engine = ScriptedEngine(delay=0)
    session, store = _session(tmp_path, engine, max_tokens=3)
    list(session.send("One"))
    assert session.edits.drop_last_reply()  # regenerate
    assert not session.edits.drop_last_reply()  # (nothing left to drop)
    list(session.send())
    assert [r[0] for r in _rows(store, session)] == ["user", "assistant"]
    # continue: the reply starts from the last one's tokens
    last = session.conversation[-1].content
    assert session.edits.drop_last_reply()
    prefix = [Token(i, i, p.piece, p.text, 0.0) for i, p in enumerate(engine.tokenize(last))]
    prepared = session.prepare(prefix)
    assert prepared.request.reply_prefix_ids == tuple(t.id for t in prefix)
    for event in engine.generate(prepared.request):
        if isinstance(event, Token):
            session.took([event])
        elif isinstance(event, Finished):
            session.finished(event)
    assert session.conversation[-1].content.startswith(last)  # (the scripted text goes on)
    # edit: the last user turn and its reply go; its text comes back
    assert session.edits.take_last_user() == "One"
    assert session.conversation == [] and _rows(store, session) == []


def test_a_failed_reply_keeps_what_it_wrote(tmp_path):
    session, store = _session(tmp_path, max_tokens=3)
    session.add_user("Go")
    session.prepare()
    session.took([Token(0, 5, b" half", " half", 0.0)])
    assert session.failed("the model worker died") == " half"
    assert session.conversation[-1].content == " half"
    role, text, status = _rows(store, session)[-1]
    assert (role, text, status) == ("assistant", " half", MessageStatus.ERROR)


def test_a_failure_event_from_the_engine_ends_the_reply(tmp_path):
    session, store = _session(tmp_path, ScriptedEngine(delay=0, fail_with="server said no"))
    events = list(session.send("Hi"))
    assert isinstance(events[-1], Failed)
    assert [m.role for m in session.conversation] == ["user"]  # nothing written: no reply kept
    assert not session.streaming


def test_resume_reopens_a_saved_conversation(tmp_path):
    session, store = _session(tmp_path, max_tokens=2)
    session.set_system_prompt("Old prompt")
    list(session.send("Remember me"))
    cid = session.history.conversation_id
    session.new_chat()
    assert session.conversation == []
    conv, kept = session.resume(cid)
    assert conv.id == cid and [m.role for m in kept] == ["user", "assistant"]
    assert session.conversation[0].content == "Remember me"
    assert session.system_prompt == "Old prompt"


def test_without_an_engine_send_says_so():
    with pytest.raises(EngineError, match="no model is loaded"):
        list(ChatSession().send("Hi"))


def test_live_settings_reach_the_reply_in_progress_only(tmp_path):
    engine = ScriptedEngine(delay=0)
    session, _ = _session(tmp_path, engine)
    assert session.change_settings(SamplerSettings(temperature=0.1)) is False
    session.add_user("Hi")
    session.prepare()
    assert session.change_settings(SamplerSettings(temperature=0.2)) is True
    assert engine._settings.temperature == 0.2


@pytest.mark.slow
def test_on_the_real_model_the_oldest_turns_leave_the_prompt_to_fit(tmp_path, model_path):
    from chatapp.engine.factory import make_engine

    engine = make_engine(LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=0))
    try:
        session, store = _session(tmp_path, engine, max_tokens=8, temperature=0.0)
        for i in range(6):
            events = list(session.send(f"Message number {i}: " + "words and more words " * 6))
            assert isinstance(events[-1], Finished), events[-1]
        session.add_user("And the last question?")
        prepared = session.prepare()
        assert prepared.dropped > 0
        kept = list(prepared.request.messages)
        assert kept[-1].content == "And the last question?"  # the newest stays
        assert engine.count_tokens(kept) <= 256 - 8
        session.failed("not sent")  # (closes the reply row prepare opened)
        # all 12 earlier messages stay on disk, the new turn and its (failed, empty) reply too
        assert len(store.messages(session.history.conversation_id)) == 14
    finally:
        engine.close()


def test_the_live_reply_is_the_one_store_of_a_replys_tokens_and_says_which_to_show(tmp_path):
    """took() keeps every token in the session's LiveReply and says, once, which to show (with
    several replies decoded together, the first's: the others wait in `alternatives`); the
    reply's rates, settings and end are facts of the same object."""
    session, _ = _session(tmp_path, max_tokens=8)
    session.add_user("Go")
    live = session.prepare().reply
    assert live is session.draft and live.tokens == []
    first, other = Token(0, 5, b" a", " a", 10.0), Token(0, 6, b" b", " b", 10.0, seq=1)
    assert session.took([first, other]) == [first]
    assert session.took([Token(1, 7, b" c", " c", 10.5, seq=1)]) == []
    second = Token(1, 8, b" d", " d", 10.25)
    changed = SamplerSettings(temperature=0.1)
    session.settings_applied(1, changed)
    assert session.took([second]) == [second]
    assert live.tokens == [first, second] and live.text == " a d"
    assert [t.id for t in live.alternatives[1]] == [6, 7]
    assert live.speeds == [4.0] and live.decode_tps == 4.0 and live.ttft_s == 10.0 - live.submitted
    assert live.settings_at(0) == session.settings and live.settings_at(1) == changed
    failed = session.failed("stopped")
    assert failed == " a d" and live.error == "stopped" and session.draft is None
