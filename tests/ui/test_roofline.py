"""The roofline chart draws the ceilings and a reply's two points, or says what it waits for."""

from __future__ import annotations

from textual.app import App

from chatapp.gguf.header import read_header
from chatapp.models.reply_limits import reply_limits
from chatapp.models.token_cost import model_cost
from chatapp.ui.widgets.roofline import RooflineChart, ceiling_line


def test_the_ceiling_is_the_lower_of_bandwidth_and_peak():
    xs, ys = ceiling_line(30.0, 60.0)
    assert xs[0] < 1 < xs[-1]
    assert ys[0] == 30.0 * xs[0] and ys[-1] == 60.0  # the slope, then the flat roof
    assert ys == sorted(ys)


async def test_the_chart_shows_a_reply_under_the_ceilings(model_path):
    limits = reply_limits(model_cost(read_header(model_path)), 40, 200, 110.0, 260.0, 31.0, 67.0)

    class Host(App):
        def compose(self):
            yield RooflineChart(id="roof")

    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        chart = app.query_one(RooflineChart)
        chart.show(None)
        await pilot.pause()
        assert "after a reply" in chart.render().plain
        chart.show(limits)
        await pilot.pause()
        drawn = chart.render().plain
        assert "31.0 GB/s" in drawn and f"{limits.bound}-bound" in drawn
        assert f"decode {limits.decode_gflops:.1f} GFLOP/s" in drawn
        assert "FLOPs per byte read" in drawn
