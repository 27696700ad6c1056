"""The stats panel: the context bar takes its colours from the theme."""

from __future__ import annotations

import re
from pathlib import Path

from textual.app import App, ComposeResult
from textual.color import Color

from chatapp.ui.themes import PANEL_DEFAULTS
from chatapp.ui.widgets import stats
from chatapp.ui.widgets.stats import LiveStats, StatsPanel


class PanelApp(App):
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(PANEL_DEFAULTS)

    def compose(self) -> ComposeResult:
        yield StatsPanel()


def _bar_colours(panel: StatsPanel, used: int, total: int) -> set[str]:
    text = panel.context_text(used, total)
    return {
        span.style.color.triplet.hex
        for span in text.spans
        if not isinstance(span.style, str) and span.style.color is not None
    }


def _theme(app: App, name: str) -> str:
    return Color.parse(app.theme_variables[name]).hex.lower()


async def test_context_bar_uses_the_theme_and_follows_a_theme_switch():
    app = PanelApp()
    async with app.run_test(size=(80, 12)) as pilot:
        panel = app.query_one(StatsPanel)
        panel.stats = LiveStats(n_past=10, n_ctx=100)
        app.theme = "nord"
        await pilot.pause()
        assert _bar_colours(panel, 10, 100) == {_theme(app, "success")}
        assert _bar_colours(panel, 80, 100) == {_theme(app, "warning")}
        assert _bar_colours(panel, 95, 100) == {_theme(app, "error")}
        nord_success = _theme(app, "success")
        app.theme = "catppuccin-latte"
        await pilot.pause()
        await pilot.pause()
        assert _theme(app, "success") != nord_success
        assert _bar_colours(panel, 10, 100) == {_theme(app, "success")}


def test_no_fixed_colour_is_left_in_the_stats_panel():
    source = Path(stats.__file__).read_text(encoding="utf-8")
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b", source)
    assert not re.search(r"[\"'](red|green|yellow|blue|white|black|grey\d*)[\"']", source)
