"""The chat screen's lesson: which step is shown, the tab it opens, where it stopped."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Input, TabbedContent, TextArea

from chatapp.chat import lesson
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.screens.panel_view import PanelView
from chatapp.ui.widgets.lesson_strip import LessonStrip
from chatapp.ui.widgets.tokens import TokenStrip

FREE_KEYS = frozenset({"n", "p"})  # the lesson's letters, typed into an empty message box


class LessonView:
    """The lesson over a chat screen's panels: its keys name these methods (`lesson('next')`);
    `begin_at`, set before the screen mounts, opens the chat at that step (`chatapp lesson`).
    While it is on the screen has the `-lesson` class, and #side the class of the step's panel
    (`-step-stats` or `-step-tabs`): below 100 columns app.tcss shows that panel alone, above
    the message box."""

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
        self.strip.add_class("-on")
        self.screen.add_class("-lesson")
        self.screen.query_one("#prompt", PromptInput).free_keys = FREE_KEYS
        self._go(lesson.remembered() if index is None else index)

    def next(self) -> None:
        self._go(self.strip.index + 1)

    def back(self) -> None:
        self._go(self.strip.index - 1)

    def _go(self, index: int) -> None:
        index = max(0, min(len(lesson.STEPS) - 1, index))
        self.strip.read_machine()  # (the tune on first use may have measured the ceilings)
        self.strip.index = index
        lesson.remember(index)
        step = lesson.STEPS[index]
        panel = step.panel
        side = self.screen.query_one("#side")
        side.set_class(panel == "stats", "-step-stats")
        side.set_class(panel.startswith("tab-"), "-step-tabs")
        side.remove_class("-sampler")  # (F6 showed it in place of the step's panel)
        self.view.show_panels()
        if panel.startswith("tab-"):
            self.screen.query_one(TabbedContent).active = panel
        if step.id == "probs":  # its text is about the reply's first token: so is the panel
            reply = self.screen.query_one("#reply-tokens", TokenStrip)
            if reply.tokens:
                reply.cursor = 0
        elif step.id == "tokens":  # the sentence box in sight (at 80x24 it is below the fold)
            box = self.screen.query_one("#tokenizer-input")
            self.screen.call_after_refresh(box.scroll_visible, animate=False)

    def leave(self) -> bool:
        """Esc: the lesson off, the chat as it was (False where the lesson is not on)."""
        if not self.on:
            return False
        self.strip.remove_class("-on")
        self.screen.remove_class("-lesson")
        self.screen.query_one("#prompt", PromptInput).free_keys = frozenset()
        self.view.back_to_the_chat()
        return True

    def keys_free(self) -> bool:
        """→ ← n p step the lesson only while it is on and they would do nothing else: in the
        message box while it is empty; never in another box (the Tokens tab's sentence) nor
        in a widget that takes ← → itself (a slider after F6, the token strip, the tabs)."""
        if not self.on:
            return False
        focused, prompt = self.screen.focused, self.screen.query_one("#prompt")
        if focused is None:
            return True
        if focused is prompt:
            return not getattr(prompt, "text", "")
        if isinstance(focused, (Input, TextArea)):
            return False
        keys = focused._bindings.key_to_bindings
        return "left" not in keys and "right" not in keys
