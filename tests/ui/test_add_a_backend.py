"""docs/add-a-backend.md's engine, one file, through the real app: its reply streams, and the
panels follow the capabilities it declares (the steering and inside tabs say they are
unavailable without asking it; its tokens are shown)."""

from __future__ import annotations

import inspect

from fakes.echo_engine import EchoEngine
from helpers import SIZE, pane, send, wait_until
from textual.widgets import TabbedContent

from chatapp.engine.inspection import REMOTE_NOTE as INSIDE_NOTE
from chatapp.engine.protocol import Engine
from chatapp.engine.steering import REMOTE_NOTE as STEERING_NOTE
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.sampler import Slider
from chatapp.ui.widgets.steer_panel import SteerPanel


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()][1:]


def test_the_echo_engine_is_an_engine_declaring_only_what_it_has():
    engine = EchoEngine()
    assert isinstance(engine, Engine)
    methods = [n for n in dir(Engine) if not n.startswith("_") and callable(getattr(Engine, n))]
    assert "generate" in methods and "inspect" in methods
    for name in methods:
        assert _params(getattr(EchoEngine, name)) == _params(getattr(Engine, name)), name
    caps = engine.capabilities
    assert caps.tokenize and caps.raw_prompt
    assert not (caps.steering or caps.inside or caps.candidates or caps.live_settings)


async def test_a_one_file_engine_streams_a_reply_and_its_panels_follow_its_capabilities():
    engine = EchoEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "hello from a new backend")
        done = lambda: pane(app).reply is None and pane(app).last_reply is not None  # noqa: E731
        await wait_until(pilot, done)
        reply = pane(app).last_reply
        assert reply.finished.reason == "eog"
        assert pane(app).session.conversation[-1].content == "hello from a new backend"
        assert [t.text for t in reply.tokens] == ["hello", " from", " a", " new", " backend"]
        # What it has works: its tokens are in the Tokens tab, the prompt's too.
        tokens = app.chat_screen.view.token_panel
        assert len(tokens.strip.tokens) == 5 and tokens.prompt
        # What it lacks: no candidates in the Next token tab ...
        assert not app.chat_screen.view.probs.candidates
        # ... the Steer tab says steering is unavailable and shows no controls ...
        await pilot.press("alt+v")
        steer = app.query_one(SteerPanel)
        await pilot.pause()
        status = str(steer.query_one("#steer-status").render())
        assert status == STEERING_NOTE[0].upper() + STEERING_NOTE[1:] + "."
        assert not steer.query("#steer-choice") and not steer.query(Slider)
        assert not steer.query_one("#steer-make-box").display
        # ... and the Inside tab says so too, without asking the engine for a capture.
        app.query_one(TabbedContent).active = "tab-inside"
        inside = app.query_one(InsidePanel)
        await wait_until(pilot, lambda: inside.status == INSIDE_NOTE)
        inside.action_capture()
        await pilot.pause()
        assert inside.status == INSIDE_NOTE and inside.inspection is None
        assert engine.asked == []
