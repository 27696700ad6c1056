"""The conversation list: open, new, rename, delete (confirmed) and search saved chats."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, Static

from chatapp.history.store import Store, StoreError
from chatapp.ui.literal import cell, literal


@dataclass(frozen=True)
class Choice:
    """What the user picked: open a conversation (id) or start a new one (id None)."""

    conversation_id: int | None


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 60; height: auto; border: round $error;
        background: $surface; padding: 1 2; }
    ConfirmScreen Horizontal { height: 3; align-horizontal: right; }
    """
    BINDINGS = [
        Binding("escape,n", "answer(False)", "No", id="confirm.no"),
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(literal(self.question))
            with Horizontal():
                yield Button("Delete (y)", variant="error", id="yes")
                yield Button("Keep (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class ConversationsScreen(ModalScreen[Choice | None]):
    """Saved conversations, newest first; typing in the box searches their text."""

    DEFAULT_CSS = """
    ConversationsScreen { align: center middle; }
    ConversationsScreen > Vertical { width: 100; max-width: 95%; height: 85%;
        border: round $primary; background: $surface; padding: 0 1; }
    ConversationsScreen DataTable { height: 1fr; }
    ConversationsScreen #conv-help { color: $text-muted; height: 1; }
    ConversationsScreen #rename { display: none; }
    ConversationsScreen #rename.visible { display: block; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close", id="history.close"),
        Binding("ctrl+n", "new", "New chat", id="history.new", priority=True),
        Binding("f2", "rename", "Rename", id="history.rename"),
        Binding("delete,ctrl+d", "delete", "Delete", id="history.delete", priority=True),
    ]

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.ids: list[int] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Input(placeholder="Search conversations…", id="search")
            yield DataTable(id="conversations", cursor_type="row", zebra_stripes=True)
            yield Input(placeholder="New title, Enter saves", id="rename")
            yield Static(
                "Enter opens · ctrl+n new · F2 rename · Del delete · Esc closes", id="conv-help"
            )

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("updated", "title", "messages", "match")
        self.refresh_rows()
        table.focus()

    def refresh_rows(self, needle: str = "") -> None:
        table = self.query_one(DataTable)
        table.clear()
        self.ids = []
        try:
            if needle.strip():
                hits = self.store.search(needle)
                seen: set[int] = set()
                for hit in hits:
                    if hit.conversation_id in seen:
                        continue
                    seen.add(hit.conversation_id)
                    conv = self.store.get_conversation(hit.conversation_id)
                    self._add_row(conv, hit.snippet)
            else:
                for conv in self.store.list_conversations(limit=500):
                    self._add_row(conv, "")
        except StoreError as exc:
            self.notify(str(exc), severity="error")

    def _add_row(self, conv, match: str) -> None:
        when = datetime.datetime.fromtimestamp(conv.updated).strftime("%Y-%m-%d %H:%M")
        self.query_one(DataTable).add_row(
            when, cell(conv.title), str(conv.message_count), cell(match)
        )
        self.ids.append(conv.id)

    def _selected(self) -> int | None:
        table = self.query_one(DataTable)
        if not self.ids or table.cursor_row is None or table.cursor_row >= len(self.ids):
            return None
        return self.ids[table.cursor_row]

    @on(Input.Changed, "#search")
    def on_search(self, event: Input.Changed) -> None:
        self.refresh_rows(event.value)

    @on(DataTable.RowSelected)
    def on_row_selected(self, event: DataTable.RowSelected) -> None:
        conv = self._selected()
        if conv is not None:
            self.dismiss(Choice(conv))

    def action_close(self) -> None:
        rename = self.query_one("#rename", Input)
        if rename.has_class("visible"):
            rename.remove_class("visible")
            self.query_one(DataTable).focus()
            return
        self.dismiss(None)

    def action_new(self) -> None:
        self.dismiss(Choice(None))

    def action_rename(self) -> None:
        conv = self._selected()
        if conv is None:
            return
        rename = self.query_one("#rename", Input)
        rename.value = self.store.get_conversation(conv).title
        rename.add_class("visible")
        rename.focus()

    @on(Input.Submitted, "#rename")
    def on_rename(self, event: Input.Submitted) -> None:
        conv = self._selected()
        event.input.remove_class("visible")
        if conv is None:
            return
        try:
            self.store.rename(conv, event.value)
        except StoreError as exc:
            self.notify(str(exc), severity="error")
        self.refresh_rows(self.query_one("#search", Input).value)
        self.query_one(DataTable).focus()

    def action_delete(self) -> None:
        conv = self._selected()
        if conv is None:
            return
        title = self.store.get_conversation(conv).title

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.store.delete(conv)
            except StoreError as exc:
                self.notify(str(exc), severity="error")
            self.refresh_rows(self.query_one("#search", Input).value)

        self.app.push_screen(ConfirmScreen(f"Delete “{title}” and all its messages?"), done)
