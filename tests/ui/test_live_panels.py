"""The live panels: they join their conversation on mount, follow its `model` reactive, and hide
themselves where the engine lacks what they need."""

from __future__ import annotations

from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, wait_until
from textual.widgets import TabbedContent

from chatapp.engine.capabilities import Capabilities
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.lesson_strip import LessonStrip
from chatapp.ui.widgets.limits_panel import LimitsPanel
from chatapp.ui.widgets.live_panel import LivePanel
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.tokens import TokenPanel


class NoInsideEngine(ScriptedEngine):
    """Chats and reports candidates, but cannot look inside the model."""

    capabilities = Capabilities(candidates=True, tokenize=True)


async def test_every_live_panel_joins_and_follows_the_reply_and_the_model():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: pane(app).model is not None and pane(app).model.state == "ready"
        )
        joined = pane(app).panels.panels
        assert {type(p) for p in joined} == {
            StatsPanel, ProbPanel, TokenPanel, InsidePanel, LimitsPanel, LessonStrip
        }  # fmt: skip
        assert set(app.screen.query(LivePanel)) == set(joined)
        assert app.chat_screen.view.stats_panel.info is pane(app).model.info
        assert app.query_one(InsidePanel).display  # the scripted engine can look inside
        await send(pilot, app, "Hello")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        live = pane(app).last_reply.live
        assert all(panel.reply is live for panel in joined)


async def test_a_panel_whose_capability_is_missing_hides_itself():
    app = ChatApp(lambda: NoInsideEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: pane(app).model is not None and pane(app).model.state == "ready"
        )
        await pilot.pause()
        inside = app.query_one(InsidePanel)
        assert inside.has_class("-lacking") and not inside.display
        assert not app.query_one(TabbedContent).get_tab("tab-inside").display
        assert app.query_one(ProbPanel).display  # (candidates: it has them)
