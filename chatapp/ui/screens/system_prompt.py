"""A dialog to set the system prompt, and to pick, save as, or delete named ones."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from chatapp import jsonfile
from chatapp.chat.prompts import PromptError, all_prompts, delete_prompt, save_prompt
from chatapp.config import Config
from chatapp.ui.literal import literal


class SystemPromptScreen(ModalScreen[str | None]):
    """The prompt's text (edit it freely) beside the named prompts: config.toml's [prompts.NAME]
    and the ones saved here (prompts.json). Picking one puts its text in the box; Use sets it
    for this chat (dismissed with the text; None: nothing changes)."""

    DEFAULT_CSS = """
    SystemPromptScreen { align: center middle; }
    SystemPromptScreen > Vertical { width: 96; max-width: 98%; height: 24; max-height: 98%;
        border: round $primary; background: $surface; padding: 0 1; }
    SystemPromptScreen #prompt-body { height: 1fr; }
    SystemPromptScreen OptionList { width: 26; height: 1fr; }
    SystemPromptScreen TextArea { height: 1fr; }
    SystemPromptScreen #prompt-note { height: 1; color: $text-muted; }
    SystemPromptScreen #prompt-name { width: 1fr; }
    SystemPromptScreen .row { height: 3; }
    SystemPromptScreen .buttons { align-horizontal: right; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="system.cancel"),
        Binding("ctrl+s", "save", "Use", id="system.save"),
    ]

    def __init__(self, text: str, config: Config | None = None) -> None:
        super().__init__()
        self.initial = text
        self.config = config or Config()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("System prompt (ctrl+s uses it, Esc cancels); named prompts on the left")
            with Horizontal(id="prompt-body"):
                yield OptionList(id="prompt-names")
                yield TextArea(self.initial, id="system-text", soft_wrap=True)
            yield Static("", id="prompt-note")
            with Horizontal(classes="row"):
                yield Input(placeholder="name to save as", id="prompt-name")
                yield Button("Save as", id="save-as")
                yield Button("Delete", id="delete", variant="error")
            with Horizontal(classes="row buttons"):
                yield Button("Use", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        with jsonfile.kept_aside() as aside:
            self.refill()
        if aside:
            self.note(_aside_note(aside).removeprefix("; "))
        self.query_one("#system-text", TextArea).focus()

    def refill(self, select: str | None = None) -> None:
        names = self.query_one("#prompt-names", OptionList)
        names.clear_options()
        prompts = all_prompts(self.config)
        names.add_options(
            Option(literal(p.name + ("" if p.saved else " (config)")), id=p.name) for p in prompts
        )
        if select is not None and any(p.name == select for p in prompts):
            names.highlighted = [p.name for p in prompts].index(select)

    def note(self, text: str) -> None:
        self.query_one("#prompt-note", Static).update(literal(text))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        name = event.option.id
        found = [p for p in all_prompts(self.config) if p.name == name]
        if found:
            self.query_one("#system-text", TextArea).text = found[0].text
            self.query_one("#prompt-name", Input).value = found[0].name
            where = "prompts.json" if found[0].saved else "config.toml"
            self.note(f"{name} (from {where}): edit it, Use it, or Save as to keep a change")

    def action_save_as(self) -> None:
        name = self.query_one("#prompt-name", Input).value
        with jsonfile.kept_aside() as aside:
            try:
                save_prompt(name, self.query_one("#system-text", TextArea).text)
            except PromptError as exc:
                self.note(str(exc) + _aside_note(aside))
                return
        self.refill(select=name.strip())
        self.note(f"saved as {name.strip()}" + _aside_note(aside))

    def action_delete(self) -> None:
        names = self.query_one("#prompt-names", OptionList)
        if names.highlighted is None:
            self.note("pick the prompt to delete on the left")
            return
        name = names.get_option_at_index(names.highlighted).id or ""
        with jsonfile.kept_aside() as aside:
            try:
                delete_prompt(name, self.config)
            except PromptError as exc:
                self.note(str(exc) + _aside_note(aside))
                return
        self.refill()
        self.note(f"deleted {name}" + _aside_note(aside))

    def action_save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"save": self.action_save, "save-as": self.action_save_as}
        actions.update({"delete": self.action_delete, "cancel": self.action_cancel})
        actions[event.button.id or "cancel"]()


def _aside_note(aside: list[Path]) -> str:
    """'; prompts.json did not parse: kept as prompts.json.broken-...' ('' when none was): the
    notice beside it gives the whole path."""
    if not aside:
        return ""
    kept = aside[-1]
    return f"; {kept.name.partition('.broken-')[0]} did not parse: kept as {kept.name}"
