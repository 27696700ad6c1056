"""Snapshot tests of the main screens (scripted engine; timings pinned so they are stable)."""

from __future__ import annotations

from scripted_engine import ScriptedEngine

from chatapp.metrics import GenerationStats
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.stats import LiveStats

SIZE = (120, 40)
PINNED = LiveStats(
    ttft_s=0.042,
    first_paint_s=0.051,
    prefill_tps=812.0,
    prompt_new=31,
    prompt_reused=0,
    decode_tps=96.5,
    tokens=36,
    n_past=67,
    n_ctx=2048,
    stop_reason="eog",
    state="ready",
)


async def _steady(pilot) -> None:
    pilot.app.query_one("#prompt").cursor_blink = False
    await pilot.pause()


async def _after_reply(pilot) -> None:
    app: ChatApp = pilot.app
    await _steady(pilot)
    while app.engine is None:
        await pilot.pause(0.02)
    prompt = app.query_one("#prompt")
    prompt.text = "Describe the sea at night."
    await pilot.press("enter")
    while app.reply is not None or app.last_reply is None:
        await pilot.pause(0.02)
    app.stats_panel.stats = PINNED
    app.stats_panel.speeds = tuple(80.0 + (i * 7) % 30 for i in range(36))
    app.clear_notifications()
    await pilot.pause()


FINISHED = GenerationStats(
    prompt_tokens=31,
    prompt_evaluated=31,
    completion_tokens=36,
    ttft_s=0.042,
    prefill_s=0.038,
    decode_s=0.363,
    n_past=67,
    n_ctx=2048,
)


def make_app() -> ChatApp:
    engine = ScriptedEngine(delay=0.0, pinned_stats=FINISHED)
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


def test_small_terminal_layout(snap_compare):
    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=_after_reply)


def test_a_thinking_models_reply_with_its_reasoning_folded(snap_compare, monkeypatch):
    import chatapp.ui.reply as reply_module
    from chatapp.sampling import SamplerSettings

    words = ["<think>", "The", "user", "asks", "about", "the", "sea", ".", "</think>"]
    words += "The sea at night is dark and calm .".split()
    engine = ScriptedEngine(delay=0.0, pinned_stats=FINISHED, words=words)
    app = ChatApp(
        lambda: engine,
        model_label="scripted.gguf",
        settings=SamplerSettings(max_tokens=len(words)),
    )
    # the label's timings come from the engine's clock: pinned so the picture is stable
    monkeypatch.setattr(
        reply_module,
        "thinking_label",
        lambda draft, reply: f"Thinking · {draft.thinking_tokens} tokens",
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=_after_reply)


def test_a_picked_token_makes_a_second_branch(snap_compare):
    async def run_before(pilot) -> None:
        await _after_reply(pilot)
        app: ChatApp = pilot.app
        app.query_one("#probs").focus()
        await pilot.press("down", "down", "enter")
        while len(app.session.branch_points()) != 1 or app.reply is not None:
            await pilot.pause(0.02)
        app.stats_panel.stats = PINNED
        app.stats_panel.speeds = tuple(80.0 + (i * 7) % 30 for i in range(36))
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)
