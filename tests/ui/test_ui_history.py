"""The TUI keeps every conversation in SQLite: saved while streaming, listed, resumed."""

from __future__ import annotations

from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, wait_until

from chatapp.chat.recorder import ChatHistory
from chatapp.history.store import Store
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.conversations import ConversationsScreen


def make_app(tmp_path, engine=None) -> tuple[ChatApp, Store]:
    store = Store(tmp_path / "history.db")
    app = ChatApp(lambda: engine or ScriptedEngine())
    pane(app).session.history = ChatHistory(store, app._warn)
    return app, store


async def test_turns_and_replies_are_saved_with_stats(tmp_path):
    app, store = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Tell me about the sea")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        (conv,) = store.list_conversations()
        assert conv.title == "Tell me about the sea"
        msgs = store.messages(conv.id)
        assert [m.role for m in msgs] == ["user", "assistant"]
        assert msgs[1].text == pane(app).session.conversation[-1].content
        assert msgs[1].status == "complete" and msgs[1].stop_reason == "eog"
        assert msgs[1].completion_tokens == len(pane(app).last_reply.tokens)
        assert msgs[1].model is not None and msgs[1].model.quant == "Q4_1"


async def test_reply_row_exists_while_streaming_and_stop_marks_it(tmp_path):
    app, store = make_app(tmp_path, ScriptedEngine(delay=0.08))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Go on")
        await wait_until(
            pilot,
            lambda: pane(app).reply is not None and len(pane(app).reply.tokens) >= 16,
            timeout=30,
        )
        conv = store.list_conversations()[0]
        streaming = store.messages(conv.id)[-1]
        assert streaming.role == "assistant" and streaming.status == "streaming"
        assert streaming.text, "the partial reply is saved at least every second"
        await pilot.press("escape")
        await wait_until(pilot, lambda: pane(app).reply is None)
        final = store.messages(conv.id)[-1]
        assert final.status == "interrupted" and final.stop_reason == "cancelled"


async def test_regenerate_replaces_the_stored_reply(tmp_path):
    engine = ScriptedEngine()
    app, store = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        first = pane(app).last_reply
        engine.words = "A second and different reply".split()  # so the stored text tells them apart
        await pilot.press("ctrl+r")
        # the regenerated reply, not the first one (finished before ctrl+r acts)
        await wait_until(
            pilot,
            lambda: (
                pane(app).reply is None
                and pane(app).last_reply is not first
                and pane(app).last_reply.finished is not None
            ),
        )
        assert len(engine.requests) == 2
        conv = store.list_conversations()[0]
        msgs = store.messages(conv.id)
        assert [m.role for m in msgs] == ["user", "assistant"]
        assert msgs[1].text == pane(app).session.conversation[-1].content
        assert msgs[1].text.startswith(" A second and different reply")


async def test_conversation_list_opens_a_saved_chat(tmp_path):
    store = Store(tmp_path / "history.db")
    cid = store.create_conversation("Old chat", system_prompt="Be brief.")
    store.add_message(cid, "user", "What is a lighthouse?")
    rid = store.begin_reply(cid)
    store.finish_reply(rid, "A tower with a light.", "complete", stop_reason="eog")
    app = ChatApp(lambda: ScriptedEngine())
    pane(app).session.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await pilot.press("f7")
        await pilot.pause()
        assert isinstance(app.screen, ConversationsScreen)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(pane(app).session.conversation) == 2)
        assert pane(app).session.system_prompt == "Be brief."
        assert [i.text for i in pane(app).chat.items()] == [
            "What is a lighthouse?",
            "A tower with a light.",
        ]
        assert "stop: eog" in pane(app).chat.items()[1].footer
        await send(pilot, app, "And a lightship?")
        await wait_until(
            pilot, lambda: pane(app).reply is None and len(pane(app).session.conversation) == 4
        )
        assert len(store.messages(cid)) == 4, "the resumed chat goes on in the same conversation"


async def test_history_search_and_delete_with_confirmation(tmp_path):
    store = Store(tmp_path / "history.db")
    for title in ("Sea shanties", "Mountain trails"):
        cid = store.create_conversation(title)
        store.add_message(cid, "user", f"about {title.lower()}")
    app = ChatApp(lambda: ScriptedEngine())
    pane(app).session.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f7")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#search").value = "mountain"
        await pilot.pause()
        assert len(screen.ids) == 1
        screen.query_one("DataTable").focus()
        await pilot.press("delete")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert [c.title for c in store.list_conversations()] == ["Sea shanties"]


async def test_a_broken_store_warns_once_and_the_chat_goes_on(tmp_path):
    app, store = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        store.close()
        (tmp_path / "history.db").unlink()
        await send(pilot, app, "Still here?")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        assert pane(app).session.conversation[0].content == "Still here?"
        assert pane(app).session.conversation[-1].role == "assistant"
        assert pane(app).session.history._failed
