"""The Steer tab on the real bundled model: a slider moved mid-reply bends the reply from the
next token (marked in Tokens), the concept meter, a remote engine's sentence, a vector of
another width, and a snapshot of the panel."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import SIZE, Host, pane, send, wait_until
from test_remote_stub import StubServer
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Select, TabbedContent

from chatapp.engine import control_vector, steer_library
from chatapp.engine.local.engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.engine.remote.client import RemoteEngine
from chatapp.engine.steering import REMOTE_NOTE, SteerVector
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.sampler import Slider
from chatapp.ui.widgets.steer_panel import SteerPanel

GREEDY = SamplerSettings(temperature=0.0, repeat_penalty=1.0, max_tokens=160)
PROMPT = "Tell me about your day at the park."


def _app(model_path: str, settings: SamplerSettings = GREEDY) -> ChatApp:
    options = LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0)
    return ChatApp(lambda: LocalEngine(options), settings=settings)


def _status(panel: SteerPanel) -> str:
    return str(panel.query_one("#steer-status").render())


async def _add(pilot, app: ChatApp, name: str) -> SteerPanel:
    """Pick `name` in the Steer tab and press Add (a built-in pair is made in a worker)."""
    await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
    await pilot.press("alt+v")
    panel = app.query_one(SteerPanel)
    await wait_until(pilot, lambda: bool(panel.query("#steer-choice")))
    panel.query_one("#steer-choice", Select).value = name
    await pilot.click("#steer-add")
    return panel


async def _reply_ids(pilot, app: ChatApp) -> list[int]:
    await wait_until(pilot, lambda: pane(app).reply is None, timeout=120)
    return [t.id for t in pane(app).last_reply.tokens]


@pytest.mark.slow
async def test_a_slider_moved_mid_reply_bends_the_reply_from_the_next_token(fresh_dirs, model_path):
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await _add(pilot, app, "happy")
        await wait_until(pilot, lambda: bool(panel.query("#steer-strength-0")), timeout=120)
        assert steer_library.find(model_path, "happy") is not None  # made and kept
        session = pane(app).session
        session.ignore_eos = True  # both replies run to max_tokens
        await send(pilot, app, PROMPT)
        plain = await _reply_ids(pilot, app)

        await pilot.press("ctrl+r")  # the same prompt again, greedy: the same reply...
        await wait_until(pilot, lambda: pane(app).reply is not None)
        await wait_until(pilot, lambda: len((pane(app).reply or pane(app).last_reply).tokens) > 3)
        assert pane(app).reply is not None, "the reply must still be streaming"
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("shift+right", "shift+right")  # ...until happy goes to +4
        steered = await _reply_ids(pilot, app)

        strip = app.chat_screen.token_panel.strip
        changes = session.last_steering.changes  # one per key press (+2.5, then +4)
        assert strip.marks == {index for index, _ in changes} and strip.marks
        first = min(strip.marks)
        assert 3 < first < len(plain) - 20
        assert steered[:first] == plain[:first]
        assert steered[first : first + 20] != plain[first : first + 20]
        assert str(strip.render()).count("▸") == len(strip.marks)
        assert changes[-1][1][0].strength == pytest.approx(4.0)
        assert f"from token {changes[-1][0]} of the reply" in _status(panel)

        # The concept meter of that reply: a colour per token, the selected token's curve.
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("m")
        await wait_until(pilot, lambda: len(strip.concept) == len(steered), timeout=60)
        assert sum(not np.isnan(v) for v in strip.concept) > len(steered) // 2
        assert max(v for v in strip.concept if not np.isnan(v)) == pytest.approx(1.0)
        strip.cursor = first + 2
        await pilot.pause()
        curve = str(app.query_one(InsidePanel).query_one("#inside-concept").render())
        assert "'happy' at each layer" in curve and "token " in curve and "reply " in curve


async def test_a_remote_engine_gets_one_sentence_and_no_controls(fresh_dirs):
    stub = StubServer()
    threading.Thread(target=stub.serve_forever, args=(0.05,), daemon=True).start()
    try:
        app = ChatApp(lambda: RemoteEngine(stub.url))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.slot.engine is not None)
            await pilot.press("alt+v")
            panel = app.query_one(SteerPanel)
            await pilot.pause()
            assert _status(panel) == REMOTE_NOTE[0].upper() + REMOTE_NOTE[1:] + "."
            assert not panel.query("#steer-choice") and not panel.query(Slider)
    finally:
        stub.shutdown()
        stub.server_close()


async def test_a_vector_of_another_width_is_one_sentence_in_the_panel(fresh_dirs, model_path):
    narrow = control_vector.ControlVector({n: np.ones(8, np.float32) for n in range(1, 4)}, "x")
    control_vector.write(steer_library.vector_path(model_path, "narrow"), narrow)
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await _add(pilot, app, "narrow")
        await wait_until(pilot, lambda: "wide" in _status(panel))
        text = _status(panel)
        assert "'narrow'" in text and "is 8 wide" in text and "is 576 wide" in text
        assert "\n" not in text.strip() and panel.query_one("#steer-status").has_class("-error")
        assert not panel.query("#steer-strength-0") and pane(app).session.steering is None


class _SteerScreen(Screen):
    def __init__(self, panel: SteerPanel) -> None:
        super().__init__()
        self.panel = panel

    def compose(self) -> ComposeResult:
        yield self.panel


def test_the_steer_panel_snapshot(snap_compare, fresh_dirs, engine, model_path):
    from chatapp.chat.session import ChatSession

    session = ChatSession()
    panel = SteerPanel(session, lambda: engine, id="steer")

    async def run_before(pilot) -> None:
        path = str(steer_library.vector_path(model_path, "happy"))
        panel.vectors = [SteerVector("happy", path, 1.5), SteerVector("formal", path, -0.75)]
        panel.model_ready(engine.info)
        await pilot.pause()
        panel.query_one("#steer-strength-0").focus()
        await pilot.pause()

    assert snap_compare(Host(_SteerScreen(panel)), terminal_size=(60, 30), run_before=run_before)


def test_the_steer_tab_follows_alt_v_and_lists_the_built_in_pairs(fresh_dirs, model_path):
    panel = SteerPanel.__new__(SteerPanel)
    labels = [str(label) for label, _ in SteerPanel.choices(panel, model_path)]
    assert labels == [f"{n} (built-in: made on first use)" for n in ("formal", "french", "happy")]
    assert TabbedContent  # (the tab itself is driven in the tests above)
