"""Snapshot tests of the main screens (scripted engine on a made-up clock, first paint pinned)."""

from __future__ import annotations

import threading
import time

import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, wait_until

from chatapp.metrics import GenerationStats
from chatapp.ui.app import ChatApp
from chatapp.ui.conversation.pane import ConversationPane

# The one number of the Speed panel read from the wall clock, pinned where it is measured; the
# rest (rates, sparkline, the "why" note) reaches the picture through the app's own path.
FIRST_PAINT_S = 0.051
# Seconds between tokens on the scripted engine's made-up clock: 80-109 t/s, a varied sparkline.
GAPS = tuple(1 / (80.0 + (i * 7) % 30) for i in range(36))


@pytest.fixture(autouse=True)
def pinned_first_paint(monkeypatch):
    """Each reply's first paint FIRST_PAINT_S after its submit (and before the reply ends: the
    scripted engine waits for it)."""
    measured = ConversationPane._record_first_paint

    def pinned(pane: ConversationPane, reply) -> None:
        reply.live.submitted = time.perf_counter() - FIRST_PAINT_S
        measured(pane, reply)
        pane.slot.engine.paint_gate.set()

    monkeypatch.setattr(ConversationPane, "_record_first_paint", pinned)


def pinned_engine(**kwargs) -> ScriptedEngine:
    gate = threading.Event()
    return ScriptedEngine(
        delay=0.0, pinned_stats=FINISHED, pinned_gaps=GAPS, paint_gate=gate, **kwargs
    )


async def _steady(pilot) -> None:
    pilot.app.query_one("#prompt").cursor_blink = False
    await pilot.pause()


async def _after_reply(pilot) -> None:
    app: ChatApp = pilot.app
    await _steady(pilot)
    await wait_until(pilot, lambda: app.slot.engine is not None)
    prompt = app.query_one("#prompt")
    prompt.text = "Describe the sea at night."
    await pilot.press("enter")
    await wait_until(pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None)
    app.clear_notifications()
    await pilot.pause()


# The engine's own account of the reply, as the scripted engine gives it for "Describe the sea at
# night." (8 prompt tokens, 36 reply tokens).
FINISHED = GenerationStats(
    prompt_tokens=8,
    prompt_evaluated=8,
    completion_tokens=36,
    ttft_s=0.042,
    prefill_s=0.010,
    decode_s=0.363,
    n_past=44,
    n_ctx=2048,
)


def make_app() -> ChatApp:
    engine = pinned_engine()
    return ChatApp(lambda: engine, model_label="scripted.gguf")


def test_main_screen_after_a_reply(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_after_reply)


def test_tokens_tab_with_templated_prompt(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        await pilot.press("f4")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_light_theme(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        pilot.app.theme = "chatapp-light"
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare):
    async def run_before(pilot) -> None:
        await _steady(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=run_before)


def test_help_screen_end_explains_the_inside_tab(snap_compare):
    async def run_before(pilot) -> None:
        from textual.containers import VerticalScroll

        await _steady(pilot)
        await pilot.press("f1")
        await pilot.pause()
        pilot.app.screen.query_one(VerticalScroll).scroll_end(animate=False)
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=run_before)


def test_small_terminal_layout(snap_compare):
    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=_after_reply)


def test_a_thinking_models_reply_with_its_reasoning_folded(snap_compare, monkeypatch):
    import chatapp.ui.conversation.reply as reply_module
    from chatapp.sampling import SamplerSettings

    words = ["<think>", "The", "user", "asks", "about", "the", "sea", ".", "</think>"]
    words += "The sea at night is dark and calm .".split()
    engine = pinned_engine(words=words)
    app = ChatApp(
        lambda: engine,
        model_label="scripted.gguf",
        settings=SamplerSettings(max_tokens=len(words)),
    )
    # the label's timings come from the engine's clock: pinned so the picture is stable
    monkeypatch.setattr(
        reply_module,
        "thinking_label",
        lambda live: f"Thinking · {live.thinking_tokens} tokens",
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=_after_reply)


def test_a_picked_token_makes_a_second_branch(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        app: ChatApp = pilot.app
        app.query_one("#probs").focus()
        await pilot.press("down", "down", "enter")
        await wait_until(
            pilot,
            lambda: len(pane(app).session.edits.branch_points()) == 1 and pane(app).reply is None,
        )
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_80x24_layout(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_after_reply)


def test_200x60_layout(snap_compare):
    assert snap_compare(make_app(), terminal_size=(200, 60), run_before=_after_reply)


def test_80x24_panels(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        await pilot.press("f3")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)


def test_80x24_sampler(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        await pilot.press("f6")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
