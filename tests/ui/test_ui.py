"""Pilot tests of the chat TUI: scripted engine for fast flows, the real model for streaming."""

from __future__ import annotations

import pytest
from fakes.engines import WORDS, ScriptedEngine
from helpers import SIZE, pane, send, wait_until

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.chat import ChatScreen
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.widgets.sampler import Slider
from chatapp.ui.widgets.tokens import TokenStrip


async def test_send_streams_reply_and_updates_panels():
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        assert [m.role for m in pane(app).session.conversation] == ["user", "assistant"]
        assert pane(app).session.conversation[-1].content.startswith(" The sea is calm")
        items = pane(app).chat.items()
        assert [i.role for i in items] == ["user", "assistant"]
        assert items[-1].text == pane(app).session.conversation[-1].content
        assert "stop: eog" in items[-1].footer
        assert (
            app.chat_screen.view.probs.candidates and app.chat_screen.view.probs.chosen is not None
        )
        assert (
            len(app.chat_screen.view.token_panel.strip.tokens)
            == len(pane(app).last_reply.tokens)
            == 2 * len(WORDS)
        )
        stats = app.chat_screen.view.stats_panel.stats
        assert stats.tokens == 2 * len(WORDS) and stats.stop_reason == "eog"
        assert stats.ttft_s is not None and stats.first_paint_s is not None
        assert app.chat_screen.view.token_panel.prompt, "the templated prompt tokens are kept"


async def test_escape_stops_the_reply():
    engine = ScriptedEngine(delay=0.05)
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Go on")
        await wait_until(
            pilot, lambda: pane(app).reply is not None and len(pane(app).reply.tokens) >= 2
        )
        await pilot.press("escape")
        await wait_until(pilot, lambda: pane(app).reply is None)
        assert pane(app).last_reply.finished.reason == "cancelled"
        assert len(pane(app).last_reply.tokens) < 2 * len(WORDS)
        assert pane(app).session.conversation[-1].role == "assistant"


async def test_slider_mid_reply_reaches_the_engine_and_is_recorded():
    engine = ScriptedEngine(delay=0.1)
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Go on")
        await wait_until(pilot, lambda: (pane(app).reply or pane(app).last_reply).tokens[3:])
        assert pane(app).reply is not None, "the reply must still be streaming"
        slider = app.query_one("#slider-temperature", Slider)
        slider.focus()
        await pilot.press("left", "left")
        await wait_until(pilot, lambda: pane(app).reply is None)
        changes = pane(app).last_reply.live.settings_changes
        assert changes, "the reply recorded when the new settings took effect"
        index, settings = changes[-1]
        assert settings.temperature == pytest.approx(0.7)
        assert 3 <= index < 2 * len(WORDS)
        status = str(app.chat_screen.sampler.query_one("#sampler-status").render())
        assert status.startswith("applied from token")
        footer = pane(app).chat.items()[-1].footer
        assert "settings changed at token" in footer


async def test_rewind_resamples_from_the_selected_token():
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        first_ids = [t.id for t in pane(app).last_reply.tokens]
        app.query_one("#tabs").active = "tab-tokens"
        strip = app.query_one("#reply-tokens", TokenStrip)
        strip.cursor = 5
        await pilot.pause()
        assert app.chat_screen.view.probs.step == 5
        assert app.chat_screen.view.probs.chosen == first_ids[5]
        await pilot.press("ctrl+w")
        await wait_until(pilot, lambda: len(engine.requests) == 2 and pane(app).reply is None)
        assert engine.requests[-1].reply_prefix_ids == tuple(first_ids[:5])
        assert len(pane(app).chat.items()) == 2, "the reply is replaced, not duplicated"
        assert [t.id for t in pane(app).last_reply.tokens][:5] == first_ids[:5]


async def test_regenerate_edit_continue_and_new_chat():
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "First question")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(engine.requests) == 2 and pane(app).reply is None)
        assert [m.role for m in pane(app).session.conversation] == ["user", "assistant"]
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert app.query_one("#prompt").text == "First question"
        assert pane(app).session.conversation == []
        app.query_one("#prompt").text = "Second question"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(engine.requests) == 3 and pane(app).reply is None)
        assert pane(app).session.conversation[0].content == "Second question"
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert pane(app).session.conversation == [] and pane(app).chat.items() == []


async def test_engine_error_keeps_the_conversation():
    engine = ScriptedEngine(fail_with="the prompt is 5000 tokens but the context holds 2048")
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "A very long prompt")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        status = str(app.query_one("#status-line").render())
        assert "context holds 2048" in status
        assert pane(app).session.conversation[0].content == "A very long prompt"
        assert "error" in pane(app).chat.items()[-1].classes


async def test_bad_model_file_is_a_clear_error_and_typing_still_works(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"NOPE" * 10)
    app = ChatApp(lambda: LocalEngine(LoadOptions(model_path=str(bad))))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "error" in str(app.query_one("#status-line").render()))
        status = str(app.query_one("#status-line").render())
        assert "is not a GGUF model file" in status
        prompt = app.query_one("#prompt")
        prompt.focus()
        await pilot.press(*"still typing")
        assert prompt.text == "still typing"


async def test_theme_switch_is_remembered():
    remembered = []
    app = ChatApp(lambda: ScriptedEngine(), remember_theme=remembered.append)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "chatapp-dark"
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert app.theme != "chatapp-dark"
        assert remembered[-1] == app.theme
        assert {"chatapp-dark", "chatapp-light", "chatapp-high-contrast"} <= set(
            app.available_themes
        )


async def test_the_theme_set_at_start_is_not_remembered_as_a_pick():
    """Only a theme the user picks is remembered: the one the app starts with (here the default,
    standing in for a theme file that could not be read) must not overwrite the saved choice."""
    remembered: list[str] = []
    app = ChatApp(lambda: ScriptedEngine(), theme_name="mine", remember_theme=remembered.append)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "chatapp-dark"
        assert remembered == []


async def test_tokenizer_box_tokenizes_typed_text():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        app.query_one("#tabs").active = "tab-tokens"
        await pilot.pause()
        box = app.query_one("#tokenizer-input")
        box.focus()
        await pilot.press(*"It works on any sentence")
        typed = app.query_one("#typed-tokens", TokenStrip)
        await wait_until(pilot, lambda: len(typed.tokens) == 5)


async def test_help_screen_lists_every_binding():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        listed = {row[2] for row in app.screen.rows}
        for binding in ChatScreen.BINDINGS:
            assert binding.id and binding.id in listed
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.slow
async def test_real_model_send_stream_and_stop(model_path):
    app = ChatApp(
        lambda: LocalEngine(LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0))
    )
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Write a long story about a lighthouse keeper.")
        await wait_until(
            pilot,
            lambda: pane(app).reply is not None and len(pane(app).reply.tokens) >= 5,
            timeout=60,
        )
        await pilot.press("escape")
        await wait_until(pilot, lambda: pane(app).reply is None, timeout=30)
        reply = pane(app).last_reply
        assert reply.finished is not None and reply.finished.reason == "cancelled"
        assert reply.item.text == reply.finished.text and reply.finished.text.strip()
        assert app.chat_screen.view.probs.candidates
        # a rate, whatever the machine's load (a busy 2-core host decodes well under 1 t/s
        # at times): behaviour, never a speed bound
        stats = app.chat_screen.view.stats_panel.stats
        assert stats.decode_tps is not None and stats.decode_tps > 0
        assert stats.tokens >= 5
        assert len(app.chat_screen.view.token_panel.prompt) > 10
        assert any(t.piece == b"<|im_start|>" for t in app.chat_screen.view.token_panel.prompt)
        # A second turn works on the same worker and reuses the KV cache.
        pane(app).session.settings = pane(app).session.settings.with_(max_tokens=8)
        await send(pilot, app, "Thanks!")
        await wait_until(
            pilot,
            lambda: pane(app).reply is None and len(pane(app).session.conversation) == 4,
            timeout=60,
        )
        assert app.chat_screen.view.stats_panel.stats.prompt_reused > 0


async def test_side_panels_redraw_at_most_every_panel_interval_and_end_complete():
    engine = ScriptedEngine(delay=0.004, words=WORDS * 6)
    app = ChatApp(lambda: engine)
    redraws: list[int] = []
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        original = pane(app).panels.show

        def counted(live=None) -> None:
            redraws.append(len(live.tokens) if live else 0)
            original(live)

        pane(app).panels.show = counted  # type: ignore[method-assign]
        await send(pilot, app, "Tell me more")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        reply = pane(app).last_reply
        assert len(reply.tokens) == 2 * len(WORDS) * 6
        batches = len(pane(app).paint_log)
        # the UI's own clock: on a loaded machine it paints later than the tokens were made
        span = pane(app).paint_log[-1][0] - pane(app).paint_log[0][0]
        # at most one redraw per interval (plus the first token and the finish)
        assert len(redraws) <= span / app.slot.cadence.panels_s + 3 < batches
        # and once the reply is done every panel shows all of it
        assert len(app.chat_screen.view.token_panel.strip.tokens) == len(reply.tokens)
        assert app.chat_screen.view.probs.chosen == reply.tokens[-1].id
        assert app.chat_screen.view.stats_panel.stats.tokens == len(reply.tokens)
        # from one store: the panels hold the session's LiveReply, the strip its very tokens
        screen = app.chat_screen.view  # (the side panels)
        assert screen.token_panel.reply is screen.probs.reply is screen.stats_panel.reply
        assert screen.token_panel.reply is reply.live
        assert all(
            a is b for a, b in zip(screen.token_panel.strip.tokens, reply.tokens, strict=True)
        )


async def test_finished_messages_are_two_widgets_and_follow_the_theme():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        item = pane(app).chat.items()[-1]
        assert len(list(item.query("*"))) == 1  # the body Static holds role, text and footer

        def role_colour():
            return item.query_one(".body").content.renderables[0].style.color

        before = role_colour()
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: role_colour() != before)
        assert role_colour() == item.get_component_rich_style("messageview--role").color


async def test_a_streamed_paragraph_asks_for_layout_only_when_it_grows():
    from textual.app import App

    from chatapp.ui.widgets.chat import ChatView, SteadyParagraph

    layouts: list[bool] = []
    original = SteadyParagraph.update

    def update(self, content="", *, layout=True):
        if self.is_mounted:  # (each batch also builds a throw-away paragraph to copy from)
            layouts.append(layout)
        original(self, content, layout=layout)

    class One(App):
        def get_theme_variable_defaults(self):  # the panel colours chatapp's widgets use
            from chatapp.ui.themes import PANEL_DEFAULTS

            return dict(PANEL_DEFAULTS)

        def compose(self):
            yield ChatView()

    app = One()
    async with app.run_test(size=(60, 30)) as pilot:
        chat = app.query_one(ChatView)
        item = await chat.add("assistant")
        SteadyParagraph.update = update
        try:
            for i in range(120):
                await item.write(f"word{i % 10} ")
                await pilot.pause()
        finally:
            SteadyParagraph.update = original
        paragraph = item.query_one(SteadyParagraph)
        lines = paragraph.content_size.height
        assert lines > 5  # it wrapped onto many lines...
        assert 0 < layouts.count(True) <= lines + 2  # ...asking for a layout about once a line
        assert layouts.count(False) > 60
        await item.finish(item.text)
        assert "word9 word0" in str(item.query_one(".body").content.renderables[1].markup)


async def test_a_continued_reply_hides_its_old_stats_line_until_it_is_done():
    from chatapp.sampling import SamplerSettings

    engine = ScriptedEngine(delay=0.1)  # (slow enough to look at the reply mid-stream)
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=6))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Go on")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        item = pane(app).chat.items()[-1]
        assert "6 tokens · stop: max" in item.footer

        def shown() -> str:
            return "".join(str(r) for r in item.query_one(".body").content.renderables)

        await pilot.press("ctrl+o")
        await wait_until(
            pilot, lambda: pane(app).reply is not None and len(pane(app).reply.tokens) > 8
        )
        assert "stop:" not in shown()  # the old stats line is not above the streamed text
        await wait_until(pilot, lambda: pane(app).reply is None)
        assert "12 tokens · stop: max" in shown()


async def test_a_failed_background_task_is_one_readable_line():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)  # set on the UI's own thread

        def broken() -> None:
            raise OSError("the disk went away")

        app.run_worker(broken, name="saving the history", thread=True, exit_on_error=False)
        await wait_until(pilot, lambda: any(n.severity == "error" for n in app._notifications))
        (note,) = [n for n in app._notifications if n.severity == "error"]
        assert note.message == "saving the history failed: the disk went away"
        assert app.is_running
