"""The lesson in the chat, on the real model: each step's text holds this run's numbers (the
fit step's compare is driven in test_ui_compare.py)."""

from __future__ import annotations

import pytest
from helpers import SIZE, add_steering, pane, submit, wait_until
from textual.widgets import TabbedContent

from chatapp import ceilings, machine
from chatapp.chat import lesson
from chatapp.chat.live_reply import LiveReply
from chatapp.chat.recorder import ChatHistory
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.history.store import Store
from chatapp.stats_text import decode_text, ms_text
from chatapp.textsafe import token_display
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.lesson_strip import LessonStrip
from chatapp.ui.widgets.sampler import Slider


def _app(model_path: str) -> ChatApp:
    return ChatApp(
        lambda: LocalEngine(LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)),
        config=Config(autotune=False),
    )


def _shown(app: ChatApp) -> str:
    return app.query_one(LessonStrip).render().plain


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_lesson_walks_its_steps_with_this_runs_numbers(
    model_path, fresh_dirs, monkeypatch, size
):
    monkeypatch.setattr(ceilings, "READ_BUFFER_MIB", 64)
    machine.remember_ceilings(ceilings.measure(2).to_dict())
    app = _app(model_path)
    store = Store(fresh_dirs / "history.db")
    pane(app).session.history = ChatHistory(store, app._warn)  # (as `chatapp lesson` has)
    async with app.run_test(size=size) as pilot:
        await submit(pilot, app, "Name three colours.")
        await wait_until(pilot, lambda: pane(app).last_reply is not None, 120)
        await wait_until(pilot, lambda: pane(app).reply is None, 120)
        live = pane(app).last_reply.live
        stats, info = live.finished.stats, pane(app).model.info
        await pilot.press("alt+e")  # (listed in F1)
        await pilot.pause(0.2)
        tabs, seen = app.query_one(TabbedContent), {}
        for i, step in enumerate(lesson.STEPS):
            assert app.query_one(LessonStrip).index == i
            seen[step.id] = _shown(app)
            if step.panel.startswith("tab-"):
                assert tabs.active == step.panel
            await pilot.press("n" if i % 2 else "right")
            await pilot.pause(0.1)
        assert f"{info.n_layers} layers" in seen["inference"]
        assert ms_text(stats.ttft_s) in seen["stream"]  # as the Speed panel shows it
        assert f"{stats.completion_tokens} tokens" in seen["stream"]
        assert f"{stats.prompt_tokens} tokens" in seen["tokens"]
        assert "before the samplers" in seen["probs"]
        assert f"{live.limits.mem_peak_gbps:.0f} GB/s" in seen["gpu"]
        assert "free here" in seen["fit"]
        await pilot.press("p")
        await pilot.pause(0.1)
        assert app.query_one(LessonStrip).index == len(lesson.STEPS) - 2
        assert lesson.remembered() == len(lesson.STEPS) - 2
        prompt = app.query_one("#prompt")
        prompt.text = "hi"
        prompt.focus()
        await pilot.press("n", "right")  # typing is never taken: the box has text
        await pilot.pause(0.1)
        assert (
            sorted(prompt.text) == ["h", "i", "n"]
            and app.query_one(LessonStrip).index == len(lesson.STEPS) - 2
        )
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not app.query_one(LessonStrip).display
        assert pane(app).last_reply is not None  # the conversation is kept
        assert len(pane(app).session.messages()) >= 2
    (conv,) = store.list_conversations()  # ... and in the history, as any chat's
    saved = store.messages(conv.id)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[0].text == "Name three colours." and saved[1].status == "complete"


async def _lesson_at(pilot, app: ChatApp, step: str) -> None:
    app.chat_screen.lesson.start(lesson.step_index(step))
    await pilot.pause(0.1)


async def _one_reply(pilot, app: ChatApp, text: str) -> LiveReply:
    await submit(pilot, app, text)
    await wait_until(pilot, lambda: pane(app).last_reply is not None, 120)
    await wait_until(pilot, lambda: pane(app).reply is None, 120)
    return pane(app).last_reply.live


@pytest.mark.slow
async def test_the_inside_step_quotes_the_lens_run_in_the_inside_tab(model_path, fresh_dirs):
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, 60)
        await _lesson_at(pilot, app, "inside")
        assert "After a reply it runs when this tab opens" in " ".join(_shown(app).split())
        await _one_reply(pilot, app, "Name three colours.")
        inside = app.query_one(InsidePanel)
        inside.focus()
        await pilot.press("r")  # the lens on the reply's last token
        await wait_until(pilot, lambda: inside.inspection is not None, 60)
        found = inside.inspection
        await wait_until(pilot, lambda: pane(app).session.measured.lens is found)
        layers = found.layers[1:-1]
        n, half = len(layers), layers[len(layers) // 2 - 1]
        first = next((lens.layer for lens in layers if lens.chosen_rank == 1), None)
        await wait_until(pilot, lambda: "The lens on" in _shown(app))
        text = " ".join(_shown(app).split())
        assert f"{token_display(found.chosen.piece)!r} (position {found.position})" in text
        if first is None:  # (a token sampled below the top one)
            rank = layers[-1].chosen_rank
            assert f"never the lens's top token (rank {rank} at layer {n})" in text
        else:
            assert f"top token at layer {first} of {n}" in text
        assert f"{half.chosen_p:.2f} at layer {half.layer}" in text
        assert f"{layers[-1].chosen_p:.2f} at layer {n}" in text


@pytest.mark.slow
async def test_the_steer_step_quotes_the_vector_the_steered_reply_and_the_meter(
    model_path, fresh_dirs
):
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await add_steering(pilot, app, "happy")
        await wait_until(pilot, lambda: bool(panel.query("#steer-strength-0")), 120)
        await _lesson_at(pilot, app, "steer")
        assert "A concept vector is 576 numbers" in " ".join(_shown(app).split())
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("shift+right")
        await wait_until(pilot, lambda: "is in use" in _shown(app))
        strength = pane(app).session.steering.vectors[0].strength
        assert strength > 0
        assert f"'happy' {strength:+.2f} at every layer" in " ".join(_shown(app).split())
        live = await _one_reply(pilot, app, "Tell me about your day.")
        stats = live.finished.stats
        text = " ".join(_shown(app).split())
        assert f"steered by 'happy' {strength:+.2f} at every layer" in text
        assert f"{stats.completion_tokens} tokens at {decode_text(stats.decode_tps)}" in text
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("m")  # the concept meter of the reply
        await wait_until(pilot, lambda: "The meter along 'happy'" in _shown(app), 60)
        name, found = pane(app).session.measured.meter
        assert name == "happy" and f"at layer {found.middle_layer}:" in _shown(app)
