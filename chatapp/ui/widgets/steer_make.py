"""The Steer tab's box that makes a vector from two lists of examples (name, more, less)."""

from __future__ import annotations

from textual import events
from textual.widgets import Button, Collapsible, Input, Static, TextArea

from chatapp.engine import steer_library
from chatapp.textsafe import for_terminal, printable


class NameBox(Input):
    """The new vector's name: pasted control characters become visible symbols."""

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()  # Input's own would insert them raw
        super()._on_paste(events.Paste(printable(event.text)))


class ExamplesBox(TextArea):
    """One example a line: pasted control characters become visible symbols (as in the
    prompt), so an escape sequence shows as text and never reaches the terminal."""

    async def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()  # TextArea's own would insert them raw
        await super()._on_paste(events.Paste(for_terminal(event.text)))


class MakeBox(Collapsible):
    """The name and the two example boxes; the Steer panel makes the vector (in a worker)."""

    def __init__(self) -> None:
        super().__init__(
            NameBox(placeholder="name (letters, digits, _ - .)", id="steer-name"),
            Static("More of the concept, one example a line:", classes="steer-title"),
            ExamplesBox(id="steer-positive"),
            Static("Less of it (the opposite), one a line:", classes="steer-title"),
            ExamplesBox(id="steer-negative"),
            Button("Make and add", id="steer-make", compact=True),
            title="Make a vector from examples",
            id="steer-make-box",
        )

    @property
    def vector_name(self) -> str:
        return self.query_one("#steer-name", Input).value.strip()

    def examples(self, side: str) -> tuple[str, ...]:
        """The examples typed in the `side` box ("positive" or "negative"), checked."""
        text = self.query_one(f"#steer-{side}", TextArea).text
        return steer_library.examples(text, f"the {side} box")

    def show_making(self, making: bool) -> None:
        """The button says a vector is being made (the status line may be scrolled out of
        sight above the box) and takes no second press meanwhile."""
        button = self.query_one("#steer-make", Button)
        button.label = "Making…" if making else "Make and add"
        button.disabled = making
