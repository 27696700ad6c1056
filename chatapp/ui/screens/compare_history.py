"""Past comparisons: pick a saved run to show again in the compare screen (nothing reruns)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from chatapp.models.compare_result import CompareResult
from chatapp.models.compare_runs import SavedRun, saved_runs
from chatapp.ui.literal import literal


class PastRunsScreen(ModalScreen[CompareResult | None]):
    """The saved comparisons, newest first; Enter reopens one, Esc goes back."""

    DEFAULT_CSS = """
    PastRunsScreen { align: center middle; }
    PastRunsScreen > Vertical { width: 90%; height: 70%; border: round $primary;
        border-title-color: $primary; background: $surface; padding: 0 1; }
    PastRunsScreen #past-list { height: 1fr; }
    PastRunsScreen #past-note { height: auto; color: $text-muted; }
    PastRunsScreen #past-note.error { color: $warning; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Back", id="compare.past.close")]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[SavedRun] = []

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Past comparisons"
        with box:
            yield OptionList(id="past-list")
            yield Static("", id="past-note")

    def on_mount(self) -> None:
        self.runs, notes = saved_runs()
        listing = self.query_one(OptionList)
        listing.add_options(Option(literal(run.title()), id=str(run.path)) for run in self.runs)
        listing.highlighted = 0 if self.runs else None
        listing.focus()
        note = self.query_one("#past-note", Static)
        if notes:
            more = f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""
            note.update(literal(notes[0] + more))
            note.add_class("error")
        elif self.runs:
            note.update("Enter shows a run again; Esc goes back")
        else:
            note.update("no saved comparisons yet: run one first")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.runs[event.option_index].result)
