"""The Steer tab on the real bundled model: a slider moved mid-reply bends the reply from the
next token (marked in Tokens), the concept meter, a remote engine's sentence, a vector of
another width, and a snapshot of the panel."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import numpy as np
import pytest
from fakes.servers import StubServer
from helpers import (
    SIZE,
    Host,
    add_steering,
    pane,
    screen_text,
    send,
    steer_status,
    type_text,
    wait_until,
)
from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Button, Collapsible, Input, Select, TabbedContent, TextArea

from chatapp.engine import control_vector, steer_library
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions, Token
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


async def _reply_tokens(pilot, app: ChatApp) -> list[Token]:
    await wait_until(pilot, lambda: pane(app).reply is None, timeout=120)
    return list(pane(app).last_reply.tokens)


def _moved(a: Token, b: Token) -> float:
    """How far one position's distribution moved: the largest change in log-probability over
    the candidates both list (the runner-ups move most when the top token is near certain)."""
    ours = {c.id: c.p for c in a.candidates}
    shared = [(ours[c.id], c.p) for c in b.candidates if ours.get(c.id, 0) > 0 and c.p > 0]
    assert shared
    return max(abs(math.log(p) - math.log(q)) for p, q in shared)


@pytest.mark.slow
async def test_a_slider_moved_mid_reply_bends_the_reply_from_the_next_token(fresh_dirs, model_path):
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await add_steering(pilot, app, "happy")
        await wait_until(pilot, lambda: bool(panel.query("#steer-strength-0")), timeout=120)
        assert steer_library.find(model_path, "happy") is not None  # made and kept
        session = pane(app).session
        session.ignore_eos = True  # both replies run to max_tokens
        await send(pilot, app, PROMPT)
        plain = await _reply_tokens(pilot, app)

        await pilot.press("ctrl+r")  # the same prompt again, greedy: the same reply...
        await wait_until(pilot, lambda: pane(app).reply is not None)
        await wait_until(pilot, lambda: len((pane(app).reply or pane(app).last_reply).tokens) > 3)
        assert pane(app).reply is not None, "the reply must still be streaming"
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("shift+right", "shift+right")  # ...until happy goes to +4
        steered = await _reply_tokens(pilot, app)

        strip = app.chat_screen.view.token_panel.strip
        changes = session.last_steering.changes  # one per key press (+2.5, then +4)
        assert strip.marks == {index for index, _ in changes} and strip.marks
        first = min(strip.marks)
        assert 3 < first < len(plain) - 20
        assert [t.id for t in steered[:first]] == [t.id for t in plain[:first]]
        before_mark = zip(steered[:first], plain[:first], strict=True)
        assert max(_moved(a, b) for a, b in before_mark) < 1e-4
        # The token `first` is the first computed with the vector: its distribution has moved.
        # (Whether the text then changes depends on where the keys landed: once this greedy
        # reply has settled into its loop, +4 no longer breaks it.)
        changed, before = steered[first], plain[first]
        assert changed.id != before.id or _moved(changed, before) > 1e-2
        assert str(strip.render()).count("▸") == len(strip.marks)
        assert changes[-1][1][0].strength == pytest.approx(4.0)
        assert f"from token {changes[-1][0]} of the reply" in steer_status(panel)

        # The concept meter of that reply: a colour per token, the selected token's curve.
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("m")
        await wait_until(pilot, lambda: len(strip.concept) == len(steered), timeout=60)
        assert sum(not np.isnan(v) for v in strip.concept) > len(steered) // 2
        # The farthest token from the median is at 1 or -1 (which side: where the slider
        # landed mid-reply, so the steered text itself, varies from run to run).
        assert max(abs(v) for v in strip.concept if not np.isnan(v)) == pytest.approx(1.0)
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
            assert steer_status(panel) == REMOTE_NOTE[0].upper() + REMOTE_NOTE[1:] + "."
            assert not panel.query("#steer-choice") and not panel.query(Slider)
    finally:
        stub.shutdown()
        stub.server_close()


async def test_a_vector_of_another_width_is_one_sentence_in_the_panel(fresh_dirs, model_path):
    narrow = control_vector.ControlVector({n: np.ones(8, np.float32) for n in range(1, 4)}, "x")
    control_vector.write(steer_library.vector_path(model_path, "narrow"), narrow)
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await add_steering(pilot, app, "narrow")
        await wait_until(pilot, lambda: "wide" in steer_status(panel))
        text = steer_status(panel)
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


# ---- a vector made from the two boxes -------------------------------------------------------

HAPPY = "I am so happy today!\nWhat a wonderful, joyful morning.\nLife is great and I love it."
SAD = "I am so sad today.\nWhat a gloomy, miserable morning.\nLife is hard and I hate it."


async def _open_make_box(pilot, app: ChatApp) -> SteerPanel:
    """The Steer tab with its make box open, once the model is loaded."""
    await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
    await pilot.press("alt+v")
    panel = app.query_one(SteerPanel)
    await wait_until(pilot, lambda: bool(panel.query("#steer-choice")))
    panel.query_one("#steer-make-box", Collapsible).collapsed = False
    await pilot.pause()
    return panel


async def _fill(pilot, panel: SteerPanel, name: str, positive: str, negative: str) -> None:
    """Type the name key by key, put the examples in the boxes and press the make button."""
    panel.query_one("#steer-name", Input).focus()
    await pilot.press(*name)
    panel.query_one("#steer-positive", TextArea).text = positive
    panel.query_one("#steer-negative", TextArea).text = negative
    await pilot.pause()
    panel.query_one("#steer-make", Button).press()
    await pilot.pause()


@pytest.mark.slow
async def test_a_vector_made_in_the_panel_is_kept_listed_and_steers(fresh_dirs, model_path):
    app = _app(model_path, replace(GREEDY, max_tokens=48))
    async with app.run_test(size=SIZE) as pilot:
        panel = await _open_make_box(pilot, app)
        engine = app.slot.engine
        gate, reading = threading.Event(), threading.Event()
        real = engine.residuals

        def held(texts, at="mean"):  # the real reading, held until the test has typed
            reading.set()
            assert gate.wait(60), "the test never let the reading go on"
            return real(texts, at)

        engine.residuals = held
        await _fill(pilot, panel, "cheer", HAPPY, SAD)
        await wait_until(pilot, reading.is_set)
        assert "making 'cheer': reading its 6 examples" in steer_status(panel)
        await type_text(pilot, app, "hi")  # the UI answers keys while the vector is made
        assert app.query_one("#prompt").text == "hi" and panel.working
        button = panel.query_one("#steer-make", Button)
        assert str(button.label) == "Making…" and button.disabled  # seen beside the boxes
        gate.set()
        await wait_until(pilot, lambda: "'cheer' is in use" in steer_status(panel), timeout=60)
        assert str(button.label) == "Make and add" and not button.disabled
        del engine.residuals
        app.query_one("#prompt").text = ""

        kept = {v.name: v for v in steer_library.saved(model_path)}  # as `steer list` finds it
        assert kept["cheer"].path == steer_library.vector_path(model_path, "cheer")
        assert kept["cheer"].n_embd == 576 and kept["cheer"].path.is_file()
        assert panel.vectors[0].name == "cheer" and panel.query("#steer-strength-0")
        panel.query_one("#steer-choice", Select).value = "cheer"  # listed (else it raises)

        await send(pilot, app, PROMPT)
        plain = await _reply_tokens(pilot, app)
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("shift+right", "shift+right")
        assert pane(app).session.steering.vectors[0].strength == pytest.approx(4.0)
        assert steer_status(panel).startswith("cheer +4.00 · ")  # the name as typed, never Cheer
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: pane(app).reply is not None)
        steered = await _reply_tokens(pilot, app)
        assert [t.id for t in steered] != [t.id for t in plain]


def _kept(model_path: str) -> dict[str, bytes]:
    """Every file in the model's vector folder and its bytes."""
    folder = steer_library.model_folder(model_path)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def _one_error_sentence(panel: SteerPanel) -> str:
    text = steer_status(panel)
    assert panel.query_one("#steer-status").has_class("-error") and not panel.working
    assert "\n" not in text and "Traceback" not in text and text.endswith(".")
    return text


async def test_bad_input_in_the_make_box_is_one_sentence_and_overwrites_nothing(
    fresh_dirs, model_path
):
    taken = control_vector.ControlVector({n: np.ones(576, np.float32) for n in range(1, 30)}, "")
    control_vector.write(steer_library.vector_path(model_path, "taken"), taken)
    before = _kept(model_path)
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await _open_make_box(pilot, app)
        cases = [
            ("", HAPPY, SAD, "Type a name for the vector first"),
            ("a/b", HAPPY, SAD, "'a/b' cannot name a vector: use letters, digits"),
            ("..", HAPPY, SAD, "'..' cannot name a vector"),
            ("../x", HAPPY, SAD, "'../x' cannot name a vector"),
            ("[bold]", HAPPY, SAD, "'[bold]' cannot name a vector"),
            ("taken", HAPPY, SAD, "A vector named 'taken' exists already: pick another name."),
            ("happy", HAPPY, SAD, "A vector named 'happy' exists already"),  # a built-in pair
            ("fresh", "", SAD, "The positive box has no texts: write one example a line."),
            ("fresh", HAPPY, " \n\n ", "The negative box has no texts"),
        ]
        for name, positive, negative, said in cases:
            panel.query_one("#steer-name", Input).value = ""
            await _fill(pilot, panel, name, positive, negative)
            assert said in _one_error_sentence(panel), name
            assert _kept(model_path) == before and not panel.vectors

        # A name of control characters, pasted: shown as symbols, refused in one sentence.
        box = panel.query_one("#steer-name", Input)
        box.value = ""
        box.focus()
        box.post_message(events.Paste("\x1b[31mred\x1b]0;title\x07"))
        await pilot.pause()
        assert box.value == "␛[31mred␛]0;title␇"
        panel.query_one("#steer-make", Button).press()
        await pilot.pause()
        assert "'␛[31mred␛]0;title␇' cannot name a vector" in _one_error_sentence(panel)
        assert "\x1b" not in screen_text(app)
        assert _kept(model_path) == before


@pytest.mark.slow
async def test_markup_and_escape_codes_pasted_in_the_boxes_show_as_text(fresh_dirs, model_path):
    hostile = "[bold red]I am[/] so \x1b[31mhappy\x1b[0m today \x1b]0;pwned\x07 friends"
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await _open_make_box(pilot, app)
        for side, text in (("positive", hostile), ("negative", SAD)):
            box = panel.query_one(f"#steer-{side}", TextArea)
            box.focus()
            box.post_message(events.Paste(text))
        await pilot.pause()
        shown = screen_text(app)
        assert "\x1b" not in shown and "\x07" not in shown
        shown_as = "[bold red]I am[/] so ␛[31mhappy␛[0m today ␛]0;pwned␇ friends"
        assert panel.query_one("#steer-positive", TextArea).text == shown_as
        assert "[bold red]I am[/] so ␛[31mhappy␛[0m" in shown and "␛]0;pwned␇" in shown
        panel.query_one("#steer-name", Input).value = "pasted"
        panel.query_one("#steer-make", Button).press()
        await wait_until(pilot, lambda: "'pasted' is in use" in steer_status(panel), timeout=60)
        assert [v.name for v in steer_library.saved(model_path)] == ["pasted"]
