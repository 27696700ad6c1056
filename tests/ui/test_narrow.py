"""F3 at both widths: wide, it hides the panels; narrow, the chat and the panels swap."""

from __future__ import annotations

import pytest
from helpers import wait_until
from test_snapshots import make_app, pinned_first_paint  # noqa: F401 (autouse)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_f3_hides_or_swaps_the_panels(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        left, side = app.query_one("#left"), app.query_one("#side")
        narrow = size[0] < 100
        assert app.chat_screen.view.narrow == narrow
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


@pytest.mark.asyncio
async def test_esc_in_the_narrow_panels_goes_back_to_the_chat_and_its_prompt():
    """Narrow, F6 shows the panels in place of the chat; Esc (no reply streaming) brings the
    chat back with the prompt focused, so what is typed next is not lost."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await pilot.press("f6")
        await pilot.pause()
        assert app.query_one("#side").display and not app.query_one("#left").display
        await pilot.press("escape")
        await pilot.pause()
        prompt = app.query_one("#prompt")
        assert app.query_one("#left").display and app.focused is prompt
        await pilot.press("h", "i")
        assert prompt.text == "hi"


@pytest.mark.asyncio
async def test_a_resize_that_hides_the_focused_widget_gives_the_focus_to_the_prompt():
    """Narrow with the panels shown and a slider focused, then wider: the panels' place means
    hidden there, so the focus would sit on a widget nobody sees and keys would go nowhere."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await pilot.press("f6")
        await pilot.pause()
        assert app.focused is app.query_one("#slider-temperature")
        await pilot.resize_terminal(200, 60)
        await wait_until(pilot, lambda: not app.chat_screen.view.narrow)
        await pilot.pause()
        prompt = app.query_one("#prompt")
        assert app.focused is prompt
        await pilot.press("o", "k")
        assert prompt.text == "ok"
