"""The Limits tab: a reply on the real model held against this machine's measured ceilings."""

from __future__ import annotations

import pytest
from helpers import chat_app, pane, send, submit, wait_until
from textual.widgets import Static, TabbedContent

from chatapp import ceilings, machine
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.limits_panel import LimitsPanel
from chatapp.ui.widgets.roofline import RooflineChart
from chatapp.ui.widgets.stats import StatsPanel


@pytest.mark.slow
async def test_a_reply_on_the_real_model_is_drawn_under_the_ceilings(
    model_path, fresh_dirs, monkeypatch
):
    monkeypatch.setattr(ceilings, "READ_BUFFER_MIB", 64)
    machine.remember_ceilings(ceilings.measure(2).to_dict())
    app = ChatApp(
        lambda: LocalEngine(LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)),
        config=Config(autotune=False),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await submit(pilot, app, "Name three colours.")
        await wait_until(pilot, lambda: pane(app).last_reply is not None, 120)
        await wait_until(pilot, lambda: pane(app).reply is None, 120)
        await pilot.press("alt+l")  # (listed in F1)
        await pilot.pause(0.2)
        assert app.query_one(TabbedContent).active == "tab-limits"
        line = str(app.query_one("#limits-line", Static).render())
        saved = machine.saved_ceilings()
        assert f"GB/s of {saved['mem_read_gbps']:.0f} (" in line and "the KV cache" in line
        assert "-bound" in line and "the KV cache is" in line
        drawn = app.query_one(RooflineChart).render().plain
        assert "FLOPs per byte read" in drawn and "decode" in drawn
        notes = str(app.query_one(StatsPanel).query_one("#stats-notes", Static).render())
        assert "-bound" in notes  # the Speed panel's one line


async def test_an_engine_without_limits_hides_the_tab(fresh_dirs):
    app = chat_app()  # the scripted engine declares no `limits`
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, app, "hi")
        await wait_until(pilot, lambda: pane(app).reply is None)
        assert app.query_one(LimitsPanel).has_class("-lacking")
        tabs = app.query_one(TabbedContent)
        assert tabs.get_tab("tab-limits").display is False
