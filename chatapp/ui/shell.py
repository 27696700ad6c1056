"""The chat app's view: layout, key bindings, themes, panel toggles and the help they show."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from chatapp.config import Config
from chatapp.sampling import SamplerSettings
from chatapp.ui import themes
from chatapp.ui.keys import help_rows, key_of
from chatapp.ui.literal import LiteralApp, literal
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.widgets.chat import ChatView
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.tokens import TokenPanel


class ChatShell(LiteralApp, App):
    """The screen of the chat and what only changes the view. ChatApp adds the conversation,
    the model and the reply's flow on top."""

    CSS_PATH = "app.tcss"
    TITLE = "chatapp"
    # Screen classes for app.tcss: narrow, the chat and the panels in turn; short, no sparkline.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [
        Binding("escape", "stop", "Stop", id="chat.stop"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="chat.regenerate", priority=True),
        Binding("ctrl+e", "edit_last", "Edit last", id="chat.edit_last", priority=True),
        Binding("ctrl+o", "continue_reply", "Continue", id="chat.continue", priority=True),
        Binding("ctrl+w", "rewind", "Rewind here", id="chat.rewind", priority=True),
        Binding(
            "alt+left",
            "branch_prev",
            "Previous branch",
            show=False,
            id="chat.branch_prev",
            priority=True,
        ),
        Binding(
            "alt+right",
            "branch_next",
            "Next branch",
            show=False,
            id="chat.branch_next",
            priority=True,
        ),
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new", priority=True),
        Binding("f1", "help", "Help", id="app.help", priority=True),
        Binding("f2", "system_prompt", "System", id="chat.system_prompt", priority=True),
        Binding("f3", "toggle_side", "Panels", id="view.toggle_side", priority=True),
        Binding(
            "f4", "toggle_prompt_tokens", "Prompt tokens", id="view.prompt_tokens", priority=True
        ),
        Binding("f5", "toggle_ids", "Token ids", id="view.token_ids", priority=True),
        Binding("f6", "focus_sampler", "Sampler", id="view.focus_sampler", priority=True),
        Binding("ctrl+t", "next_theme", "Theme", id="view.next_theme", priority=True),
        Binding("f7", "conversations", "History", id="chat.history", priority=True),
        Binding(
            "ctrl+b", "toggle_thinking", "Think on/off", show=False, id="chat.think", priority=True
        ),
        Binding(
            "alt+r",
            "regenerate_many(4)",
            "Regenerate x4",
            show=False,
            id="chat.regenerate_many",
            priority=True,
        ),
        Binding(
            "alt+m",
            "mark_drafts",
            "Drafts in the reply",
            show=False,
            id="chat.mark_drafts",
            priority=True,
        ),
        Binding(
            "alt+d",
            "cycle_draft",
            "Drafts off/ngram/model",
            show=False,
            id="chat.draft",
            priority=True,
        ),
        Binding(
            "alt+f", "attach_files", "Attach files", show=False, id="chat.attach", priority=True
        ),
        Binding(
            "alt+c", "copy_reply", "Copy the reply", show=False, id="chat.copy_reply", priority=True
        ),
        Binding(
            "alt+k",
            "copy_code",
            "Copy a code block (again: the next)",
            show=False,
            id="chat.copy_code",
            priority=True,
        ),
        Binding(
            "alt+a",
            "copy_conversation",
            "Copy the conversation (Markdown)",
            show=False,
            id="chat.copy_conversation",
            priority=True,
        ),
        Binding(
            "alt+g",
            "pick_grammar",
            "JSON schema / grammar",
            show=False,
            id="chat.grammar",
            priority=True,
        ),
        Binding(
            "alt+s",
            "toggle_surprise",
            "Surprise: colour the reply's tokens by p",
            show=False,
            id="chat.surprise",
            priority=True,
        ),
        Binding("f8", "pick_model", "Models", id="models.pick", priority=True),
        Binding("f9", "model_card", "Model card", id="models.card", priority=True),
        Binding("f10", "compare_models", "Compare", id="models.compare", priority=True),
        Binding(
            "ctrl+k",
            "restart_engine",
            "Restart model",
            show=False,
            id="engine.restart",
            priority=True,
        ),
    ]

    def __init__(
        self,
        config: Config | None = None,
        settings: SamplerSettings | None = None,
        model_label: str = "",
        theme_name: str | None = None,
        remember_theme: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self.config = config or Config()  # its presets, model_dirs and [keys] are used here
        self.initial_settings = settings or SamplerSettings()
        self.model_label = model_label
        self._remember_theme = remember_theme
        self._wanted_theme = theme_name
        self.theme_problems: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield ChatView(id="chat")
                yield Static("", id="status-line")
                yield PromptInput(id="prompt")
            with Vertical(id="side"):
                stats = StatsPanel(id="stats")
                stats.border_title = "Speed"
                yield stats
                with TabbedContent(id="tabs", initial="tab-probs"):
                    with TabPane("Next token", id="tab-probs"):
                        with VerticalScroll():
                            yield ProbPanel(id="probs")
                    with TabPane("Tokens", id="tab-tokens"):
                        yield TokenPanel(id="tokens")
                    with TabPane("Inside", id="tab-inside"):
                        yield InsidePanel(id="inside")
                sampler = SamplerPanel(
                    self.initial_settings, presets=self.config.all_presets(), id="sampler"
                )
                sampler.border_title = "Sampler (live)"
                yield sampler
        yield Footer()

    def setup_view(self) -> None:
        """Keys, themes, title and focus, once mounted."""
        self.set_keymap(self.config.keymap)  # [keys]: binding id -> key
        self._register_themes()
        self.sub_title = self.model_label
        self.probs.settings = self.initial_settings
        self.query_one("#prompt", PromptInput).focus()
        self.screen.screen_layout_refresh_signal.subscribe(self, self._focus_in_sight)
        self.call_after_refresh(settle_gc)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # App keys are priority bindings (they win over the text box's own ctrl and F keys),
        # but not while a dialog is open.
        if isinstance(self.screen, ModalScreen) and action in _APP_ACTIONS:
            return False
        return True

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Panel colours for themes that do not set them (Textual's built-in ones)."""
        return dict(themes.PANEL_DEFAULTS)

    def _register_themes(self) -> None:
        self.theme_problems = themes.install(self, self._wanted_theme)

    def watch_theme(self, name: str) -> None:
        if self._remember_theme is not None and self.is_mounted:
            self._remember_theme(name)

    # ---- view actions ---------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self)))

    @property
    def narrow(self) -> bool:
        """Below 100 columns: the chat and the panels take the whole width in turn."""
        return self.screen_stack[0].has_class("-narrow")

    def action_toggle_side(self) -> None:
        """Wide: hide or show the panels. Narrow: switch between the chat and the panels."""
        main = self.query_one("#main")
        main.toggle_class("-swap")
        if self.narrow:
            shown = self.probs if main.has_class("-swap") else self.query_one("#prompt")
            self.call_after_refresh(shown.focus)

    def show_panels(self) -> None:
        """Bring the panels into sight (narrow: in place of the chat)."""
        main = self.query_one("#main")
        main.set_class(self.narrow, "-swap")

    def back_to_the_chat(self) -> bool:
        """Narrow with the panels in place of the chat: the chat again, its prompt focused
        (Esc there). False where the chat is already in sight."""
        main = self.query_one("#main")
        if not (self.narrow and main.has_class("-swap")):
            return False
        self.action_toggle_side()
        return True

    def _focus_in_sight(self, screen: Screen) -> None:
        """Give the focus to the prompt where the focused widget is hidden (keys typed into a
        widget nobody sees are lost): across the 100-column breakpoint the panels' swap changes
        meaning (narrow: shown instead of the chat; wide: hidden), so a resize can hide a
        focused slider. Run on each layout refresh of the main screen (a few attribute reads)."""
        if screen is not self.screen:
            return
        focused = screen.focused
        if focused is None or all(node.display for node in focused.ancestors_with_self):
            return
        prompt = screen.query_one("#prompt")
        if all(node.display for node in prompt.ancestors_with_self):
            prompt.focus()

    def action_toggle_prompt_tokens(self) -> None:
        self.query_one(TabbedContent).active = "tab-tokens"
        self.token_panel.show_prompt = not self.token_panel.show_prompt

    def action_toggle_ids(self) -> None:
        self.token_panel.toggle_ids()

    def action_toggle_surprise(self) -> None:
        self.query_one(TabbedContent).active = "tab-tokens"
        self.token_panel.surprise = not self.token_panel.surprise

    def action_focus_sampler(self) -> None:
        self.show_panels()  # narrow: once the panels are laid out, the focus scrolls to it
        self.call_after_refresh(self.query_one("#slider-temperature").focus)

    def action_next_theme(self) -> None:
        names = sorted(self.available_themes)
        ours = [n for n in names if n.startswith("chatapp-")] or names
        i = ours.index(self.theme) if self.theme in ours else -1
        self.theme = ours[(i + 1) % len(ours)]
        self.notify(f"theme: {self.theme}")

    # ---- widgets ----------------------------------------------------------------------------

    @property
    def chat(self) -> ChatView:
        return self.query_one("#chat", ChatView)

    @property
    def probs(self) -> ProbPanel:
        return self.query_one("#probs", ProbPanel)

    @property
    def token_panel(self) -> TokenPanel:
        return self.query_one("#tokens", TokenPanel)

    @property
    def stats_panel(self) -> StatsPanel:
        return self.query_one("#stats", StatsPanel)

    @property
    def sampler(self) -> SamplerPanel:
        return self.query_one("#sampler", SamplerPanel)

    def set_status(self, text: str, error: bool = False) -> None:
        line = self.query_one("#status-line", Static)
        tag = self.status_tag()  # what applies to every reply (a grammar) stays in sight
        line.update(literal(f"{tag} · {text}" if tag and text else tag or text), layout=False)
        line.set_class(error, "error")

    def status_tag(self) -> str:
        """What the status line always starts with (ChatApp: the conversation's grammar)."""
        return ""

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            action = b.action
            yield SystemCommand(
                b.description,
                f"{b.description} ({key_of(self, b)})",
                lambda a=action: self.run_action(a),
            )
        for name in self.sampler.presets:
            yield SystemCommand(
                f"Preset: {name}",
                f"Sampler preset {name}",
                lambda n=name: self.sampler.apply_preset(n),
            )


_APP_ACTIONS = {b.action for b in ChatShell.BINDINGS if b.key != "escape"}


def settle_gc() -> None:
    """Collect now (between replies) and freeze what survives: the long-lived widgets then cost
    nothing in the collections that would otherwise pause the UI >100 ms while streaming."""
    gc.collect()
    gc.freeze()
