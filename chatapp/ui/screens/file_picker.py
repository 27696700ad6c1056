"""Pick files to attach to the next message: a folder tree (Enter on a file attaches it and the
picker stays open for more; Esc closes), beside the `/file PATH` lines typed in the input."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Static

from chatapp.textsafe import printable
from chatapp.ui.literal import literal


class FileTree(DirectoryTree):
    """A DirectoryTree whose names show control characters as visible symbols."""

    def process_label(self, label):
        return super().process_label(printable(label) if isinstance(label, str) else label)


class FilePickerScreen(ModalScreen[None]):
    """Each file chosen is handed to `attach` at once (the chat's AttachBox.add), with the
    note to update when it is read."""

    DEFAULT_CSS = """
    FilePickerScreen { align: center middle; }
    FilePickerScreen > Vertical {
        width: 90%; height: 80%; border: round $accent; background: $surface; padding: 0 1;
    }
    FilePickerScreen #picker-note { color: $text-muted; height: auto; }
    FilePickerScreen DirectoryTree { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "dismiss", "Done", id="files.done")]

    def __init__(self, root: str | Path, attach) -> None:
        super().__init__()
        self.root = Path(root)
        self.attach = attach

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Attach files"
            note = f"{self.root}: Enter attaches a file (several: one after another); Esc: done"
            yield Static(literal(note), id="picker-note")
            yield FileTree(self.root, id="picker-tree")

    def on_mount(self) -> None:
        self.query_one(DirectoryTree).focus()

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        self.attach(str(event.path), self.show_note)  # (read in a thread: told when done)

    def show_note(self, note: str) -> None:
        if self.is_attached:
            self.query_one("#picker-note", Static).update(literal(note))
