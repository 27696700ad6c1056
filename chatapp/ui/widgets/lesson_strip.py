"""The lesson's strip above the chat: the step's text, written from this session's numbers."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from chatapp import machine
from chatapp.chat.lesson import STEPS, Facts
from chatapp.chat.live_reply import LiveReply
from chatapp.chat.session import ChatSession
from chatapp.engine.protocol import ModelInfo
from chatapp.ui.widgets.live_panel import LivePanel, LoadedModel

KEYS = "→ / n next · ← / p back · Esc leaves the lesson"


class LessonStrip(LivePanel):
    """The step shown (`index`), its text redrawn as the conversation's reply and model change
    (and when the screen says its session measured something: `measured_changed`); hidden
    while the lesson is off (the `-on` class). The steering and what was measured beside the
    replies (the lens, the meter, the compare) are read from `session`."""

    DEFAULT_CSS = """
    LessonStrip { display: none; height: auto; max-height: 9; border: round $accent;
                  padding: 0 1; }
    LessonStrip.-on { display: block; }
    """

    index: var[int] = var(0)

    def __init__(self, session: ChatSession, **kwargs) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.info: ModelInfo | None = None
        self.ceilings: dict | None = None
        self.memory: int | None = None

    def model_changed(self, model: LoadedModel | None) -> None:
        super().model_changed(model)
        self.info = model.info if model is not None else None
        self.memory = machine.ram_available()
        self.refresh(layout=True)

    def read_machine(self) -> None:
        """This machine's saved ceilings (measured by `chatapp machine` or the Limits tab)."""
        self.ceilings = machine.saved_ceilings()
        self.memory = machine.ram_available()

    def watch_reply(self, live: LiveReply | None) -> None:
        if self.has_class("-on"):
            self.refresh(layout=True)

    def reply_ended(self, notes: str) -> None:
        self.refresh(layout=True)

    def watch_index(self) -> None:
        self.refresh(layout=True)

    def measured_changed(self) -> None:
        """The session's steering, lens, meter or compare changed: the text again."""
        self.refresh(layout=True)

    def facts(self) -> Facts:
        s = self.session
        return Facts(
            self.info, self.reply, self.ceilings, self.memory,
            steering=s.steering, steered=s.last_steering, measured=s.measured,
        )  # fmt: skip

    def render(self) -> Text:
        step = STEPS[self.index]
        text = Text()
        text.append(f"Lesson {self.index + 1}/{len(STEPS)}: {step.title}", style="bold")
        text.append("\n" + step.text(self.facts()) + "\n")  # (data: never markup)
        text.append(f"Try: {step.try_}.  {KEYS}", style="dim")
        return text
