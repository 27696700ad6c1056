"""The lesson's layout: at 80x24 the step's panel alone above the message box, the step's text
whole; at 120x40 the text atop the chat and the panels; at 200x60 chat, text and panels side by
side (the scripted engine: these are places on the screen, not the step's numbers)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes.engines import ScriptedEngine
from helpers import pane, send, wait_until
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Input

from chatapp.chat import lesson
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.lesson_strip import LessonStrip
from chatapp.ui.widgets.sampler import Slider


class LimitsEngine(ScriptedEngine):
    """The scripted engine with the Limits tab: every step's panel is there."""

    capabilities = replace(ScriptedEngine.capabilities, limits=True)


def _app() -> ChatApp:
    options = LoadOptions(model_path=str(smollm2_path()))
    return ChatApp(lambda: LimitsEngine(), options=options)


def _shown(widget: Widget) -> bool:
    """Laid out, not hidden, and whole on the screen."""
    region = widget.region
    return (
        all(node.display for node in widget.ancestors_with_self)
        and region.area > 0
        and widget.screen.region.contains_region(region)
    )


def _whole(strip: LessonStrip) -> bool:
    """The step's text fits the strip: no line of it is cut off."""
    width, height = strip.content_size
    return len(strip.render().wrap(strip.app.console, width)) <= height


def _panel(app, step: lesson.Step) -> Widget:
    """The step's panel: the Speed panel, or the tab it opens."""
    return app.query_one("#stats" if step.panel == "stats" else f"#{step.panel}")


def _in_sight(widget: Widget) -> bool:
    """Whole inside the visible part of each scrolling container above it."""
    return _shown(widget) and all(
        node.region.contains_region(widget.region)
        for node in widget.ancestors
        if isinstance(node, Widget) and node.is_scrollable and node.region.area
    )


def _apart(*regions: Region) -> bool:
    return all(not a.overlaps(b) for i, a in enumerate(regions) for b in regions[i + 1 :])


async def _lesson(pilot, app) -> LessonStrip:
    await send(pilot, app, "Hello")  # the steps' texts with a reply's numbers
    await wait_until(pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None)
    await pilot.press("alt+e")
    await pilot.pause()
    return app.query_one(LessonStrip)


async def test_at_80x24_each_step_shows_its_panel_alone_above_the_message_box(fresh_dirs):
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        strip = await _lesson(pilot, app)
        prompt, others = app.query_one("#prompt"), ("#stats", "#tabs", "#sampler")
        for i, step in enumerate(lesson.STEPS):
            assert strip.index == i
            panel = _panel(app, step)
            assert _shown(strip) and _whole(strip), step.id
            assert _shown(prompt) and _shown(panel), step.id
            assert _apart(strip.region, panel.region, prompt.region), step.id
            shown = [name for name in others if app.query_one(name).display]
            assert shown == (["#stats"] if step.panel == "stats" else ["#tabs"]), step.id
            if step.id == "probs":  # the text is about the reply's first token: the panel too
                assert app.query_one("#reply-tokens").cursor == 0
            if step.id == "tokens":  # its sentence box types n and p: they are not the lesson's
                box = app.query_one("#tokenizer-input", Input)
                await pilot.pause()
                assert _in_sight(box)  # (below the reply's tokens: scrolled into sight)
                box.focus()
                await pilot.press("n", "p")
                assert box.value.endswith("np") and strip.index == i
                prompt.focus()
            await pilot.press("n")
            await pilot.pause()
        await pilot.press("f6")  # the sampler, in the panel's place
        await pilot.pause()
        assert _shown(app.query_one("#sampler")) and not app.query_one("#stats").display
        assert _shown(prompt)
        slider = app.query_one("#slider-temperature", Slider)
        before = slider.value
        assert app.focused is slider
        await pilot.press("left")  # the slider's key, not the lesson's
        await pilot.pause()
        assert slider.value < before and strip.index == len(lesson.STEPS) - 1
        await pilot.press("escape")  # from the sampler: its slider has the focus
        await pilot.pause()
        assert not strip.display and _shown(app.query_one("#chat")) and _shown(prompt)


@pytest.mark.parametrize("size", [(120, 40), (200, 60)])
async def test_wide_the_text_the_chat_and_the_panel_are_all_in_sight(fresh_dirs, size):
    app = _app()
    async with app.run_test(size=size) as pilot:
        strip = await _lesson(pilot, app)
        chat = app.query_one("#chat")
        for step in lesson.STEPS:
            panel = _panel(app, step)
            assert _shown(strip) and _whole(strip), step.id
            assert _shown(chat) and _shown(panel) and _shown(app.query_one("#prompt")), step.id
            assert _apart(strip.region, chat.region, panel.region), step.id
            if size[0] >= 160:  # side by side: chat, the step's text, the panels
                assert chat.region.right <= strip.region.x < panel.region.x, step.id
            else:  # the text atop the chat and the panels
                assert strip.region.bottom <= min(chat.region.y, panel.region.y), step.id
            await pilot.press("n")
            await pilot.pause()


async def test_a_step_reads_the_ceilings_measured_since_the_lesson_began(fresh_dirs):
    """The tune on first use measures the machine's ceilings while the lesson is on: the gpu
    step quotes them when it is reached, not only those known when the lesson began."""
    from chatapp import machine

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        strip = await _lesson(pilot, app)
        assert machine.saved_ceilings() is None
        machine.remember_ceilings({"mem_read_gbps": 12.5, "gflops": 90.0})
        while lesson.STEPS[strip.index].id != "gpu":
            await pilot.press("n")
            await pilot.pause()
        assert "reads memory at 12 GB/s" in " ".join(strip.render().plain.split())
