"""A conversation longer than the context: the oldest turns leave the prompt, marked on screen."""

from __future__ import annotations

import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, status, submit, wait_until

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import ChatMessage, Finished, LoadOptions
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.chat import MessageView


@pytest.mark.slow
async def test_oldest_turns_are_left_out_and_marked(model_path):
    app = ChatApp(
        lambda: LocalEngine(LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)),
        system_prompt="You are terse.",
        settings=SamplerSettings(temperature=0.0, max_tokens=16),
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, 60)
        for i in range(6):
            ask = f"Question {i}: " + "tell me about the weather in the mountains " * 8
            pane(app).session.conversation += [
                ChatMessage("user", ask),
                ChatMessage("assistant", "Sunny. " * 20),
            ]
            await pane(app).chat.add_items(
                [MessageView("user", ask), MessageView("assistant", "ok")]
            )
        await send(pilot, app, "Final question: what is two plus two?")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        assert isinstance(pane(app).last_reply.finished, Finished), "the reply fits after trimming"
        prompt = b"".join(t.piece for t in app.chat_screen.view.token_panel.prompt).decode(
            "utf-8", "replace"
        )
        assert "You are terse." in prompt, "the system prompt is always kept"
        assert "Final question" in prompt, "the newest turn is always kept"
        assert "Question 0:" not in prompt, "the oldest turn left the prompt"
        assert len(app.chat_screen.view.token_panel.prompt) <= 512 - 16
        items = pane(app).chat.items()
        assert "left-out" in items[0].classes and "left-out" not in items[-2].classes
        assert len(pane(app).session.conversation) == 14, "the conversation itself keeps everything"


async def test_too_long_stays_in_the_input_and_left_out_messages_are_dimmed():
    engine = ScriptedEngine(delay=0, n_ctx=256)  # counts a word a token, 4 more a message
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one("#prompt")
        long = "word " * 300
        await submit(pilot, app, long)
        await pilot.pause()
        assert status(app) == (
            "the message is 304 tokens and the reply needs 16, but the context holds 256; "
            "shorten it, or load the model with a larger --ctx"
        )
        assert (
            prompt.text == long and engine.requests == [] and pane(app).session.conversation == []
        )
        ask = "tell me about the weather " * 10  # 54 tokens a message
        for _ in range(4):
            pane(app).session.conversation += [
                ChatMessage("user", ask),
                ChatMessage("assistant", ask),
            ]
            await pane(app).chat.add_items(
                [MessageView("user", ask), MessageView("assistant", ask)]
            )
        await send(pilot, app, "And by the sea?")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        sent = engine.requests[-1].messages
        assert len(sent) == 5 and sent[-1].content == "And by the sea?"  # 4 left out
        note = "the model no longer sees the first 4 messages (context 256 tokens)"
        assert status(app).endswith(" · " + note), status(app)
        dimmed = ["left-out" in it.classes for it in pane(app).chat.items()]
        assert dimmed == [True] * 4 + [False] * 6
        await send(pilot, app, "And the hills?")
        await wait_until(pilot, lambda: pane(app).reply is None and pane(app).last_reply.id == 2)
        assert note not in status(app) and "6 messages" in status(app)
        dimmed = ["left-out" in it.classes for it in pane(app).chat.items()]
        assert dimmed == [True] * 6 + [False] * 6
