"""The keys F1 and the command palette show: every binding of the chat's widgets and screens,
with its key as config.toml's [keys] rebinds it (by binding id)."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode

# Keys handled outside the bindings: shown in F1, but without an id ([keys] cannot move them).
FIXED = {
    "Message box": [("enter", "Send the message")],
    "Everywhere": [("ctrl+p", "Command palette"), ("ctrl+q", "Quit")],
    "Next token tab": [("click", "Pick a candidate: the reply goes on from it")],
}


def key_of(app: App, binding: Binding) -> str:
    """The key(s) of a binding now: [keys]'s for its id, else its own ("a / b" for several)."""
    keys = app._keymap.get(binding.id, binding.key) if binding.id else binding.key
    return " / ".join(k.strip() for k in keys.split(","))


def _sections() -> list[tuple[str, list[type[DOMNode]]]]:
    from chatapp.ui.prompt_input import PromptInput
    from chatapp.ui.screens.chat import ChatScreen
    from chatapp.ui.screens.compare import CompareScreen
    from chatapp.ui.screens.compare_history import PastRunsScreen
    from chatapp.ui.screens.conversations import ConfirmScreen, ConversationsScreen
    from chatapp.ui.screens.file_picker import FilePickerScreen
    from chatapp.ui.screens.grammar import GrammarScreen
    from chatapp.ui.screens.help import HelpScreen
    from chatapp.ui.screens.model_card import ModelCardScreen
    from chatapp.ui.screens.models import ModelPickerScreen
    from chatapp.ui.screens.system_prompt import SystemPromptScreen
    from chatapp.ui.widgets.get_models import GetModelsView
    from chatapp.ui.widgets.inside import InsidePanel
    from chatapp.ui.widgets.probs import ProbPanel
    from chatapp.ui.widgets.sampler import Slider
    from chatapp.ui.widgets.steer_panel import SteerPanel
    from chatapp.ui.widgets.tokens import TokenStrip

    return [
        ("Message box", [PromptInput]),
        ("Everywhere", [ChatScreen]),
        ("Tokens tab", [TokenStrip]),
        ("Next token tab", [ProbPanel]),
        ("Inside tab", [InsidePanel]),
        ("Steer tab (alt+v)", [SteerPanel]),
        ("Sampler slider", [Slider]),
        ("History (F7)", [ConversationsScreen, ConfirmScreen]),
        ("System prompt (F2)", [SystemPromptScreen]),
        ("Grammar or JSON schema (alt+g)", [GrammarScreen]),
        ("Attach files (alt+f)", [FilePickerScreen]),
        ("Models (F8)", [ModelPickerScreen]),
        ("Get models (F8, ctrl+g)", [GetModelsView]),
        ("Model card (F9)", [ModelCardScreen]),
        ("Compare (F10)", [CompareScreen, PastRunsScreen]),
        ("This help (F1)", [HelpScreen]),
    ]


def help_rows(app: App) -> list[tuple[str, str, str]]:
    """(key, what it does, binding id) for every key, in sections: a section's row has only
    its title (in the middle column); a fixed key has no binding id."""
    rows: list[tuple[str, str, str]] = []
    for title, classes in _sections():
        rows.append(("", title, ""))
        for cls in classes:
            for b in cls.BINDINGS:
                if isinstance(b, Binding):
                    rows.append((key_of(app, b), b.description, b.id or ""))
        rows += [(key, does, "") for key, does in FIXED.get(title, [])]
    return rows
