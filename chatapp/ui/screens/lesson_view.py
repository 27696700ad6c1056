"""The chat screen's lesson: which step is shown, the tab it opens, where it stopped."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import TabbedContent

from chatapp.chat import lesson
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.screens.panel_view import PanelView
from chatapp.ui.widgets.lesson_strip import LessonStrip

FREE_KEYS = frozenset({"n", "p"})  # the lesson's letters, typed into an empty message box


class LessonView:
    """The lesson over a chat screen's panels: its keys name these methods (`lesson('next')`);
    `begin_at`, set before the screen mounts, opens the chat at that step (`chatapp lesson`)."""

    def __init__(self, screen: Screen, view: PanelView) -> None:
        self.screen = screen
        self.view = view
        self.begin_at: int | None = None

    @property
    def strip(self) -> LessonStrip:
        return self.screen.query_one("#lesson", LessonStrip)

    @property
    def on(self) -> bool:
        return self.strip.has_class("-on")

    def start(self, index: int | None = None) -> None:
        """The lesson on, at `index` (None: where it stopped)."""
        strip = self.strip
        strip.read_machine()
        strip.add_class("-on")
        self.screen.query_one("#prompt", PromptInput).free_keys = FREE_KEYS
        self._go(lesson.remembered() if index is None else index)

    def next(self) -> None:
        self._go(self.strip.index + 1)

    def back(self) -> None:
        self._go(self.strip.index - 1)

    def _go(self, index: int) -> None:
        index = max(0, min(len(lesson.STEPS) - 1, index))
        self.strip.index = index
        lesson.remember(index)
        panel = lesson.STEPS[index].panel
        self.view.show_panels()
        if panel.startswith("tab-"):
            self.screen.query_one(TabbedContent).active = panel

    def leave(self) -> bool:
        """Esc: the lesson off, the chat as it was (False where the lesson is not on)."""
        if not self.on:
            return False
        self.strip.remove_class("-on")
        self.screen.query_one("#prompt", PromptInput).free_keys = frozenset()
        self.view.back_to_the_chat()
        return True

    def keys_free(self) -> bool:
        """→ ← n p step the lesson only while it is on and they would type nothing."""
        if not self.on:
            return False
        prompt = self.screen.query_one("#prompt")
        return self.screen.focused is not prompt or not getattr(prompt, "text", "")
