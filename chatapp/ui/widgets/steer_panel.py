"""The Steer tab: control vectors added to the model while it writes (a slider each, live from
the next token), made from two lists of examples, and the concept meter of the reply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Select, Static

from chatapp.chat.session import ChatSession
from chatapp.engine import control_vector, steer_library
from chatapp.engine.protocol import Engine, ModelInfo, SteeringApplied
from chatapp.engine.steer_checks import check_name, last_layer
from chatapp.engine.steering import REMOTE_NOTE, Meter, Steering, SteeringError, SteerVector
from chatapp.errors import ChatappError
from chatapp.ui.literal import literal
from chatapp.ui.widgets import steer_meter
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.sampler import Slider
from chatapp.ui.widgets.steer_make import MakeBox
from chatapp.ui.widgets.steer_rows import ABOUT, controls, failure, sentence, steerable
from chatapp.ui.widgets.tokens import TokenPanel, TokenStrip


class SteerPanel(VerticalScroll):
    """The session's steering drawn as sliders; changes go through ChatSession.change_steering
    (the reply in progress takes them from its next token). Making and metering run in thread
    workers that report through the messages below."""

    DEFAULT_CSS = """
    SteerPanel { height: 1fr; padding: 0 1; }
    SteerPanel #steer-status { height: auto; color: $text; }
    SteerPanel #steer-status.-error { color: $error; }
    SteerPanel #steer-about { height: auto; color: $text-muted; }
    SteerPanel #steer-controls { height: auto; }
    SteerPanel .steer-row { height: 1; }
    SteerPanel .steer-row > Select { width: 1fr; }
    SteerPanel .steer-row > Slider { width: 1fr; }
    SteerPanel Button { min-width: 8; height: 1; border: none; margin: 0 1 0 0; padding: 0 1; }
    SteerPanel .steer-title { color: $text-muted; height: 1; }
    SteerPanel TextArea { height: 5; }
    SteerPanel Collapsible { padding: 0; border-top: none; }
    """
    BINDINGS = [
        Binding("m", "meter", "Concept meter of the reply (colours in Tokens)", id="steer.meter"),
        Binding("delete", "remove", "Take the focused vector off", show=False, id="steer.remove"),
    ]

    @dataclass
    class Added(Message):
        """A vector is ready to use (made first when it was a built-in pair), or why not."""

        vector: SteerVector | None
        note: str = ""

    class Changed(Message):
        """The steering was handed to the session (a slider moved, a vector taken off)."""

    @dataclass
    class Metered(Message):
        """The concept meter of the reply's text, or why not."""

        found: Meter | None
        name: str
        pieces: list[bytes]
        error: str = ""

    def __init__(
        self,
        session: ChatSession,
        engine: Callable[[], Engine | None] = lambda: None,
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.session = session
        self.engine = engine  # the engine loaded now (None: none yet)
        self.info: ModelInfo | None = None
        self.vectors: list[SteerVector] = []  # in use, with their strengths
        self.layer_range = (0, 0)  # START-END from 1 (0: llama.cpp's default, all)
        self.meter: Meter | None = None
        self.meter_name = ""
        self.meter_rows: list[int | None] = []  # per reply token: its row in the meter
        self.meter_layer = 0  # 0: the meter's middle layer
        self.working = False  # a vector is being made

    def compose(self) -> ComposeResult:
        yield Static("Load a model to steer it.", id="steer-status")
        yield Static(ABOUT, id="steer-about")
        yield Vertical(id="steer-controls")
        yield MakeBox()

    def on_mount(self) -> None:
        self.call_after_refresh(self._follow_the_token_cursor)

    def _follow_the_token_cursor(self) -> None:
        try:
            strip = self.screen.query_one("#reply-tokens", TokenStrip)
        except NoMatches:  # (the panel alone, without the chat's Tokens tab)
            return
        self.watch(strip, "cursor", lambda _: self._show_curve(), init=False)

    # ---- the model --------------------------------------------------------------------------

    def model_ready(self, info: ModelInfo) -> None:
        """A model is loaded: its vectors; the steering kept where it is the same model
        (`chat --steer` gives the first)."""
        engine = self.engine()
        if self.info is not None and self.info.path != info.path:  # made for the other model
            self.session.steering, self.vectors, self.layer_range = None, [], (0, 0)
            self.meter = None
        elif self.info is None and self.session.steering is not None:
            steering = self.session.steering
            self.vectors = list(steering.vectors)
            self.layer_range = (steering.layer_start, steering.layer_end)
        self.info = info
        self.query_one("#steer-make-box").display = steerable(engine)
        if not steerable(engine):
            self.vectors = []
            self.say(REMOTE_NOTE[0].upper() + REMOTE_NOTE[1:] + ".")
        else:
            self.say("Pick a vector, Add, then move its slider (← →; shift: bigger steps).")
        self.call_later(self.rebuild)

    async def rebuild(self) -> None:
        """Draw the controls again from the state: the picker, a slider per vector in use, the
        layer range and the meter's layer."""
        box = self.query_one("#steer-controls", Vertical)
        await box.remove_children()
        info = self.info
        if info is None or not steerable(self.engine()):
            return
        await box.mount_all(self._controls(info))

    def _controls(self, info: ModelInfo) -> list[Widget]:
        choices = self.choices(info.path)
        return controls(choices, self.vectors, self.layer_range, self.meter_layer, info.n_layers)

    def choices(self, model_path: str) -> list[tuple[Text, str]]:
        """The vectors kept for the model, then the built-in pairs not made for it yet."""
        kept = [v.name for v in steer_library.saved(model_path)]
        todo = [n for n in steer_library.builtin_names() if n not in kept]
        return [(literal(n), n) for n in kept] + [
            (literal(f"{n} (built-in: made on first use)"), n) for n in todo
        ]

    def say(self, text: str, error: bool = False) -> None:
        line = self.query_one("#steer-status", Static)
        line.update(literal(sentence(text) if error else text))
        line.set_class(error, "-error")

    # ---- the vectors in use -----------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "steer-add":
            self.add_chosen()
        elif event.button.id == "steer-make":
            self.make_from_examples()
        elif event.button.id == "steer-meter":
            self.action_meter()

    def add_chosen(self) -> None:
        name = self.query_one("#steer-choice", Select).value
        engine, info = self.engine(), self.info
        if not isinstance(name, str):
            self.say("Pick a vector in the list first.", error=True)
            return
        if any(v.name == name for v in self.vectors):
            self.say(f"{name!r} is in use already: move its slider.", error=True)
            return
        if engine is None or info is None or self.working:
            self.say("Wait for the model (or the vector being made) first.", error=True)
            return
        made = steer_library.find(info.path, name) is not None
        pair = None if made else steer_library.builtin_pair(name)
        if pair is not None:
            n = len(pair.positive) + len(pair.negative)
            self.say(f"making {name!r} from the built-in pair: reading its {n} texts…")
        self.working = True
        self._add(engine, info.path, name)

    @work(thread=True, exit_on_error=False, group="steer")
    def _add(self, engine: Engine, model_path: str, name: str) -> None:
        notes: list[str] = []
        try:
            steering = steer_library.steering_for(
                [(name, 0.0)], model_path, engine=engine, notes=notes
            )
        except Exception as exc:  # every error ends the making with a sentence
            self.post_message(self.Added(None, failure(exc)))
            return
        self.post_message(self.Added(steering.vectors[0], "; ".join(notes)))

    async def on_steer_panel_added(self, message: Added) -> None:
        self._show_making(False)
        if message.vector is None:
            self.say(message.note, error=True)
            return
        self.vectors.append(message.vector)
        await self.rebuild()
        self.query_one(f"#steer-strength-{len(self.vectors) - 1}", Slider).focus()
        made = f"{message.note}. " if message.note else ""
        self.say(f"{made}{message.vector.name!r} is in use at strength 0: move its slider.")

    def on_slider_changed(self, message: Slider.Changed) -> None:
        message.stop()
        wid = message.slider.id or ""
        if wid.startswith("steer-strength-"):
            i = int(wid.rpartition("-")[2])
            self.vectors[i] = replace(self.vectors[i], strength=float(message.value))
        elif wid == "steer-meter-layer":
            self.meter_layer = int(message.value)
            self._show_meter()
            return
        else:
            self._layers_moved(wid, int(message.value))
        self.apply()

    def _layers_moved(self, wid: str, value: int) -> None:
        """The layer range (the other end follows where they would cross)."""
        top = last_layer(self.info.n_layers) if self.info else value
        start, end = self.layer_range[0] or 1, self.layer_range[1] or top
        start, end = (value, max(end, value)) if wid == "steer-from" else (min(start, value), value)
        self.layer_range = (start, end)
        for other, at in (("#steer-from", start), ("#steer-to", end)):
            slider = self.query_one(other, Slider)
            slider.set_reactive(Slider.value, at)
            slider.refresh()

    def apply(self) -> None:
        """The steering now, to the session: the reply in progress from its next token."""
        steering = Steering(tuple(self.vectors), *self.layer_range)
        try:
            live = self.session.change_steering(steering)
        except (ChatappError, OSError) as exc:  # a bad vector, a crashed worker
            self.say(f"the steering did not reach the model: {failure(exc)}", error=True)
            return
        shown = ", ".join(f"{v.name} {v.strength:+.2f}" for v in self.vectors) or "none"
        when = "sent: applies from the next token…" if live else "applies to the next reply"
        self.say(f"{shown} · {when}")
        self.post_message(self.Changed())

    def applied(self, event: SteeringApplied) -> None:
        """The engine says from which token of the reply the new steering counts."""
        shown = ", ".join(f"{v.name} {v.strength:+.2f}" for v in event.steering.vectors)
        self.say(f"{shown or 'off'} from token {event.index} of the reply (▸ in Tokens)")

    def action_remove(self) -> None:
        focused = self.screen.focused
        wid = focused.id if focused is not None else None
        if wid is None or not wid.startswith("steer-strength-"):
            return
        gone = self.vectors.pop(int(wid.rpartition("-")[2]))
        self.apply()
        self.say(f"{gone.name!r} taken off")
        self.call_later(self.rebuild)

    # ---- a vector made from the two boxes ---------------------------------------------------

    def make_from_examples(self) -> None:
        engine, info = self.engine(), self.info
        box = self.query_one(MakeBox)
        name = box.vector_name
        if engine is None or info is None or self.working:
            self.say("Wait for the model (or the vector being made) first.", error=True)
            return
        if not name:
            self.say("Type a name for the vector first (letters, digits, _ - .).", error=True)
            return
        try:
            check_name(name)
            pair = steer_library.Pair(name, box.examples("positive"), box.examples("negative"))
            target = steer_library.vector_path(info.path, name)
        except SteeringError as exc:
            self.say(str(exc), error=True)
            return
        if target.exists() or steer_library.builtin_pair(name) is not None:
            self.say(f"a vector named {name!r} exists already: pick another name.", error=True)
            return
        n = len(pair.positive) + len(pair.negative)
        self.say(f"making {name!r}: reading its {n} examples through the model…")
        self._show_making(True)
        self._make(engine, pair, target)

    def _show_making(self, making: bool) -> None:
        self.working = making
        self.query_one(MakeBox).show_making(making)

    @work(thread=True, exit_on_error=False, group="steer")
    def _make(self, engine: Engine, pair: steer_library.Pair, target: Path) -> None:
        try:
            vector_made = steer_library.make_vector(engine, pair)
            control_vector.write(target, vector_made, replace=False)
        except Exception as exc:  # every error ends the making with a sentence
            self.post_message(self.Added(None, f"{pair.name!r} was not made: {failure(exc)}"))
            return
        vector = SteerVector(pair.name, str(target), 0.0)
        self.post_message(self.Added(vector, f"made {pair.name!r} -> {target}"))

    # ---- the concept meter ------------------------------------------------------------------

    def action_meter(self) -> None:
        """Meter the reply shown in the Tokens tab on the focused vector (else the first)."""
        engine = self.engine()
        focused = self.screen.focused
        wid = (focused.id or "") if focused is not None else ""
        chosen = int(wid.rpartition("-")[2]) if wid.startswith("steer-strength-") else 0
        try:
            panel = self.screen.query_one(TokenPanel)
        except NoMatches:
            return
        pieces = [t.piece for t in panel.reply_tokens]
        if engine is None or not steerable(engine) or not self.vectors:
            self.say("Add a vector first: the meter measures the reply along it.", error=True)
            return
        if not pieces:
            self.say("There is no reply to measure yet.", error=True)
            return
        vector = self.vectors[chosen]
        self.say(f"metering the reply along {vector.name!r}…")
        self._meter(engine, vector, pieces)

    @work(thread=True, exclusive=True, exit_on_error=False, group="steer-meter")
    def _meter(self, engine, vector: SteerVector, pieces: list[bytes]) -> None:
        try:
            found = engine.meter(steer_meter.reply_text(pieces), control_vector.read(vector.path))
        except Exception as exc:  # (a crashed worker, a vector file gone)
            self.post_message(self.Metered(None, vector.name, pieces, failure(exc)))
            return
        self.post_message(self.Metered(found, vector.name, pieces))

    def on_steer_panel_metered(self, message: Metered) -> None:
        if message.found is None:
            self.say(message.error, error=True)
            return
        self.meter, self.meter_name = message.found, message.name
        self.meter_rows = steer_meter.match_rows(message.pieces, message.found)
        self._show_meter()

    def _show_meter(self) -> None:
        """The reply's tokens coloured at the meter's layer, and the selected one's curve."""
        found = self.meter
        if found is None:
            return
        n = found.projections.shape[1]
        layer = min(self.meter_layer or found.middle_layer, n)
        values = steer_meter.values_at(found, self.meter_rows, layer)
        self.screen.query_one(TokenPanel).show_concept(steer_meter.shares(values))
        self.say(
            f"concept meter: {self.meter_name!r} at layer {layer} of {n} (of the text read "
            "alone, unsteered): orange above the reply's median, blue below. Select a token "
            "in Tokens: its curve over the layers is in the Inside tab."
        )
        self._show_curve()

    def _show_curve(self) -> None:
        found = self.meter
        if found is None or not self.meter_rows:
            return
        if not self.screen.query_one(TokenPanel).concept:  # a new reply since: meter it again
            return
        cursor = self.screen.query_one("#reply-tokens", TokenStrip).cursor
        index = cursor if cursor is not None else len(self.meter_rows) - 1
        row = self.meter_rows[index] if 0 <= index < len(self.meter_rows) else None
        if row is not None:
            self.screen.query_one(InsidePanel).show_concept(
                steer_meter.curve(found, row, self.meter_name)
            )

    def focus_first(self) -> None:
        """The first strength slider, else the vector picker (alt+v)."""
        for wid in ("#steer-strength-0", "#steer-choice", "#steer-make-box"):
            found = self.query(wid)
            if found:
                found.first().focus()
                return
