"""F3 at both widths: wide, it hides the panels; narrow, the chat and the panels swap."""

from __future__ import annotations

import pytest
from helpers import wait_until
from test_snapshots import make_app


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_f3_hides_or_swaps_the_panels(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.engine is not None)
        left, side = app.query_one("#left"), app.query_one("#side")
        narrow = size[0] < 100
        assert app.narrow == narrow
        assert left.display and side.display != narrow
        await pilot.press("f3")
        await pilot.pause()
        assert left.display != narrow and side.display == narrow
        await pilot.press("f3")
        await pilot.pause()
        assert left.display and side.display != narrow
        await pilot.press("f6")  # the sampler is brought into sight, focused
        await pilot.pause()
        assert side.display and app.focused is app.query_one("#slider-temperature")
