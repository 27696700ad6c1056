"""Sampler sliders (keyboard and mouse) and presets; changes reach a reply in progress."""

from __future__ import annotations

import re
from collections.abc import Mapping

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Button, Static

from chatapp.sampling import BY_NAME, PRESETS, SLIDERS, Sampler, SamplerSettings
from chatapp.ui.literal import literal

SLIDER_FIELDS = tuple(row.name for row in SLIDERS)


class Slider(Widget, can_focus=True):
    """A horizontal slider for one sampler field."""

    COMPONENT_CLASSES = {"slider--track", "slider--fill", "slider--knob", "slider--label"}
    DEFAULT_CSS = """
    Slider { height: 1; width: 1fr; }
    Slider > .slider--track { color: $surface-lighten-2; }
    Slider > .slider--fill { color: $primary; }
    Slider > .slider--knob { color: $accent; text-style: bold; }
    Slider > .slider--label { color: $text; }
    Slider:focus > .slider--label { color: $accent; text-style: bold; }
    Slider:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left,h", "nudge(-1)", "Less", show=False, id="slider.less"),
        Binding("right,l", "nudge(1)", "More", show=False, id="slider.more"),
        Binding("shift+left", "nudge(-10)", "Much less", show=False, id="slider.much_less"),
        Binding("shift+right", "nudge(10)", "Much more", show=False, id="slider.much_more"),
    ]

    value: reactive[float] = reactive(0.0)
    """The current value (within the field's bounds)."""

    class Changed(Message):
        def __init__(self, slider: Slider, field: str, value: float) -> None:
            super().__init__()
            self.slider = slider
            self.field = field
            self.value = value

        @property
        def control(self) -> Slider:
            return self.slider

    def __init__(
        self, field: str, value: float, *, id: str | None = None, row: Sampler | None = None
    ) -> None:
        super().__init__(id=id)
        self.field = field
        self.sampler = sampler = row or BY_NAME[field]  # row: a slider of another panel
        self.low = sampler.bound.low
        self.high = sampler.slider_high or sampler.bound.high
        self.step = sampler.bound.step
        self.tooltip = f"{field}: {sampler.bound.help}"
        self.set_reactive(Slider.value, value)

    def render(self) -> Text:
        label = f"{self.sampler.label:<8}"
        shown = f"{int(self.value)}" if self.sampler.whole else f"{self.value:.2f}"
        width = max(4, self.size.width - len(label) - 8)
        frac = (min(self.value, self.high) - self.low) / (self.high - self.low or 1)
        knob = round(frac * (width - 1))
        text = Text(label, style=self.get_component_rich_style("slider--label"))
        text.append("━" * knob, style=self.get_component_rich_style("slider--fill"))
        text.append("●", style=self.get_component_rich_style("slider--knob"))
        text.append("─" * (width - 1 - knob), style=self.get_component_rich_style("slider--track"))
        text.append(f" {shown:>6}")
        return text

    def set_value(self, value: float) -> None:
        bound = self.sampler.bound
        value = max(bound.low, min(bound.high, value))
        steps = round((value - self.low) / self.step)
        value = self.low + steps * self.step
        value = int(round(value)) if self.sampler.whole else round(value, 4)
        if value != self.value:
            self.value = value
            self.post_message(self.Changed(self, self.field, value))

    def action_nudge(self, steps: int) -> None:
        self.set_value(self.value + steps * self.step)

    def on_click(self, event: events.Click) -> None:
        label = 8
        width = max(4, self.size.width - label - 8)
        x = event.x - label
        if 0 <= x < width:
            self.set_value(self.low + (self.high - self.low) * x / (width - 1))


class SamplerPanel(Vertical):
    """All sliders plus presets; shows when a change took effect in the reply."""

    DEFAULT_CSS = """
    SamplerPanel { height: auto; padding: 0 1; }
    SamplerPanel > #presets { height: 1; margin-top: 0; }
    SamplerPanel > #presets > Button { min-width: 8; height: 1; border: none; margin: 0 1 0 0;
        padding: 0 1; }
    SamplerPanel > #sampler-status { height: 1; color: $text-muted; }
    SamplerPanel > #draft-row { height: 1; }
    SamplerPanel > #draft-row > Button { width: 17; height: 1; border: none;
        margin: 0 1 0 0; padding: 0 1; }
    SamplerPanel > #draft-row > #draft-help { color: $text-muted; }
    """

    settings: reactive[SamplerSettings] = reactive(SamplerSettings)
    """The settings the next token will be sampled with."""

    class SettingsChanged(Message):
        def __init__(self, settings: SamplerSettings) -> None:
            super().__init__()
            self.settings = settings

    class DraftPressed(Message):
        """The drafts button: the app turns speculative decoding to its next source."""

    def __init__(
        self,
        settings: SamplerSettings,
        *,
        presets: Mapping[str, SamplerSettings] | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.set_reactive(SamplerPanel.settings, settings)
        self.presets = dict(PRESETS if presets is None else presets)
        """The preset buttons, in order: name -> settings (the built-in ones by default)."""

    def compose(self) -> ComposeResult:
        for field in SLIDER_FIELDS:
            yield Slider(field, getattr(self.settings, field), id=f"slider-{field}")
        with Horizontal(id="presets"):
            for name in self.presets:
                # A name that is not a valid widget id (a space, say) gets no id of its own.
                wid = f"preset-{name}" if re.fullmatch(r"[A-Za-z_][\w-]*", name) else None
                yield Button(literal(name), id=wid, name=name, classes="preset", compact=True)
        with Horizontal(id="draft-row"):
            yield Button("drafts: off", id="draft-toggle", compact=True)
            yield Static("speculative decoding (alt+d)", id="draft-help")
        yield Static("", id="sampler-status")

    def show_draft(self, source: str) -> None:
        """The drafts button's label: off, ngram or model."""
        self.query_one("#draft-toggle", Button).label = f"drafts: {source or 'off'}"

    def on_slider_changed(self, message: Slider.Changed) -> None:
        message.stop()
        self.settings = self.settings.with_(**{message.field: message.value})
        self.post_message(self.SettingsChanged(self.settings))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "draft-toggle":
            event.stop()
            self.post_message(self.DraftPressed())
            return
        if not event.button.has_class("preset") or event.button.name not in self.presets:
            return
        event.stop()
        self.apply_preset(event.button.name)

    def apply_preset(self, name: str) -> None:
        preset = self.presets[name]
        # A preset sets how tokens are picked; the reply length and seed stay the user's.
        self.settings = preset.with_(max_tokens=self.settings.max_tokens, seed=self.settings.seed)
        self.sync_sliders()
        self.post_message(self.SettingsChanged(self.settings))

    def sync_sliders(self) -> None:
        for field in SLIDER_FIELDS:
            slider = self.query_one(f"#slider-{field}", Slider)
            slider.set_reactive(Slider.value, getattr(self.settings, field))
            slider.refresh()

    def set_status(self, text: str) -> None:
        self.query_one("#sampler-status", Static).update(literal(text), layout=False)
