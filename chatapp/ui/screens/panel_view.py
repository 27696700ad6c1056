"""The chat screen's view of its side panels: their parts, the narrow swap, the toggles that
only change what is shown (ChatScreen lays them out, owns one and binds the keys to it)."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import TabbedContent

from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.steer_panel import SteerPanel
from chatapp.ui.widgets.tokens import TokenPanel


class PanelView:
    """The side panels of a screen with the chat beside them (#main holds both, #side the
    panels): below 100 columns they take the whole width in turn (the `-swap` class). The
    screen's view keys name its methods (`view('toggle_side')`)."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen  # where the panels are laid out: queried, its classes read

    # ---- its parts ----------------------------------------------------------------------------

    @property
    def probs(self) -> ProbPanel:
        return self.screen.query_one("#probs", ProbPanel)

    @property
    def token_panel(self) -> TokenPanel:
        return self.screen.query_one("#tokens", TokenPanel)

    @property
    def stats_panel(self) -> StatsPanel:
        return self.screen.query_one("#stats", StatsPanel)

    def steer(self) -> None:
        """The Steer tab, its first control focused."""
        self.show_panels()
        self.screen.query_one(TabbedContent).active = "tab-steer"
        self.screen.call_after_refresh(self.screen.query_one("#steer", SteerPanel).focus_first)

    def limits(self) -> None:
        """The Limits tab: the last reply against this machine's ceilings, and the roofline."""
        self.show_panels()
        self.screen.query_one(TabbedContent).active = "tab-limits"

    # ---- the layout ---------------------------------------------------------------------------

    @property
    def narrow(self) -> bool:
        """Below 100 columns: the chat and the panels take the whole width in turn."""
        return self.screen.has_class("-narrow")

    def toggle_side(self) -> None:
        """Wide: hide or show the panels. Narrow: switch between the chat and the panels."""
        main = self.screen.query_one("#main")
        main.toggle_class("-swap")
        if self.narrow:
            shown = self.probs if main.has_class("-swap") else self.screen.query_one("#prompt")
            self.screen.call_after_refresh(shown.focus)

    def show_panels(self) -> None:
        """Bring the panels into sight (narrow: in place of the chat)."""
        self.screen.query_one("#main").set_class(self.narrow, "-swap")

    def back_to_the_chat(self) -> bool:
        """Narrow with the panels in place of the chat: the chat again, its prompt focused
        (Esc there). False where the chat is already in sight."""
        if not (self.narrow and self.screen.query_one("#main").has_class("-swap")):
            return False
        self.toggle_side()
        return True

    def focus_in_sight(self, screen: Screen) -> None:
        """Give the focus to the prompt where the focused widget is hidden (keys typed into a
        widget nobody sees are lost): across the 100-column breakpoint the panels' swap changes
        meaning (narrow: shown instead of the chat; wide: hidden), so a resize can hide a
        focused slider. Run on each layout refresh of this screen (a few attribute reads)."""
        if screen is not screen.app.screen:
            return
        focused = screen.focused
        if focused is None or all(node.display for node in focused.ancestors_with_self):
            return
        prompt = screen.query_one("#prompt")
        if all(node.display for node in prompt.ancestors_with_self):
            prompt.focus()

    def toggle_prompt_tokens(self) -> None:
        self.screen.query_one(TabbedContent).active = "tab-tokens"
        self.token_panel.show_prompt = not self.token_panel.show_prompt

    def toggle_ids(self) -> None:
        self.token_panel.toggle_ids()

    def toggle_surprise(self) -> None:
        self.screen.query_one(TabbedContent).active = "tab-tokens"
        self.token_panel.surprise = not self.token_panel.surprise

    def focus_sampler(self) -> None:
        self.show_panels()  # narrow: once the panels are laid out, the focus scrolls to it
        self.screen.query_one("#side").add_class("-sampler")  # (the lesson: in its panel's place)
        self.screen.call_after_refresh(self.screen.query_one("#slider-temperature").focus)
