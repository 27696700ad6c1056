"""The lesson in the chat, on the real model: each step's text holds this run's numbers."""

from __future__ import annotations

import pytest
from helpers import pane, submit, wait_until
from textual.widgets import TabbedContent

from chatapp import ceilings, machine
from chatapp.chat import lesson
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.stats_text import ms_text
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.lesson_strip import LessonStrip


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
