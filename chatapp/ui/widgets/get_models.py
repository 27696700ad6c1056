"""F8's "Get models" view: search the Hub, a repo's GGUF files judged for this machine, download."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Button, DataTable, Input, Static

from chatapp.errors import ChatappError
from chatapp.models.hub import picker
from chatapp.models.hub.repo_files import Listing
from chatapp.models.hub.search import Found
from chatapp.models.hub.speed import Calibration
from chatapp.models.specs import parse_spec
from chatapp.ui.literal import cell, literal
from chatapp.ui.widgets.get_models_rows import FILE_COLUMNS, FileTable, Ranked
from chatapp.ui.widgets.hub_downloads import DownloadState, HubFile

Machine = Callable[[], tuple[int | None, int | None]]


class GetModelsView(Vertical):
    """Search the Hub's GGUF repos, list one's files with fit and speed here, download them.
    Downloads run in the App (they outlive F8): this view posts DownloadAsked to the App and
    shows the `download` state the App passes down."""

    DEFAULT_CSS = """
    GetModelsView { height: 1fr; }
    GetModelsView #hub-search-row { height: 1; }
    GetModelsView #hub-search { width: 1fr; background: $boost; }
    GetModelsView #hub-search-row Button { margin-left: 1; }
    GetModelsView #hub-repos { height: 1fr; min-height: 3; }
    GetModelsView #hub-files { height: 2fr; min-height: 4; }
    GetModelsView #hub-reason { height: auto; max-height: 3; color: $text-muted; }
    GetModelsView #hub-note { height: 1; color: $text-muted; }
    GetModelsView #hub-note.error { color: $error; text-style: bold; }
    GetModelsView #hub-progress { height: 1; color: $text-muted; }
    GetModelsView #hub-progress.running { color: $accent; text-style: bold; }
    GetModelsView #hub-progress.error { color: $error; text-style: bold; }
    GetModelsView #hub-buttons { height: 1; }
    GetModelsView #hub-buttons Button { margin-right: 1; }
    """
    BINDINGS = [
        Binding("space", "mark", "Mark the file", show=False, id="hub.mark"),
        Binding(
            "ctrl+d", "compare", "Download the marked, compare", id="hub.compare", priority=True
        ),
        Binding("ctrl+x", "stop", "Stop the download", id="hub.stop", priority=True),
    ]

    found: reactive[tuple[Found, ...]] = reactive(())
    """The search's repos, most downloaded first."""
    ranked: reactive[Ranked | None] = reactive(None)
    """The repo whose files are listed, judged for this machine."""
    marked: reactive[frozenset[str]] = reactive(frozenset())
    """Files marked to download and compare (their names in the repo)."""
    download: reactive[DownloadState] = reactive(DownloadState)
    """The App's download (F8 passes it down)."""
    n_ctx: reactive[int] = reactive(4096)
    """The context the memory column is computed for (F8's ctx field)."""

    @dataclass
    class DownloadAsked(Message):
        """Download these (one after another), then open F10 on them when `compare`."""

        view: GetModelsView
        files: tuple[HubFile, ...]
        compare: bool = False

    @dataclass
    class StopAsked(Message):
        """Stop the download under way."""

        view: GetModelsView

    @dataclass
    class Searched(Message):
        text: str
        found: tuple[Found, ...]
        error: str = ""

    @dataclass
    class Listed(Message):
        repo: str
        ranked: Ranked | None
        error: str = ""

    @dataclass
    class Calibrated(Message):
        calibration: Calibration | None
        error: str = ""

    def __init__(self, machine: Machine, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.machine = machine
        self.calibration: Calibration | None = None
        self._calibrating = False
        self._typed_repo = ""  # USER/REPO typed in the search box: listed at once
        self._asked = ("", "")  # the last search and repo asked for: older answers are stale

    def compose(self) -> ComposeResult:
        with Horizontal(id="hub-search-row"):
            yield Input(
                placeholder="search the Hub's GGUF models (e.g. qwen3 4b) or type USER/REPO",
                id="hub-search",
                compact=True,
            )
            yield Button("Search", id="hub-search-go", compact=True)
        yield DataTable(id="hub-repos", cursor_type="row", zebra_stripes=True)
        yield FileTable(id="hub-files", cursor_type="row", zebra_stripes=True)
        yield Static("", id="hub-reason")
        yield Static("search, then Enter on a repo lists its GGUF files", id="hub-note")
        yield Static("", id="hub-progress")
        with Horizontal(id="hub-buttons"):
            yield Button("Download (enter)", variant="primary", id="hub-download", compact=True)
            yield Button("Marked + compare (ctrl+d)", id="hub-compare", compact=True)
            yield Button("Stop (ctrl+x)", id="hub-stop", compact=True, disabled=True)

    def on_mount(self) -> None:
        self.query_one("#hub-repos", DataTable).add_columns("repo", "downloads", "likes", "updated")
        self.files_table.add_columns(*FILE_COLUMNS)

    def activate(self) -> None:
        """The view is shown: focus the search, and measure decode speed here once."""
        self.query_one("#hub-search", Input).focus()
        if self.calibration is None and not self._calibrating:
            self._calibrating = True
            self._calibrate()

    # ---- workers ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="hub-search", exit_on_error=False)
    def _search(self, text: str) -> None:
        from chatapp.models.hub.search import search

        try:
            self.post_message(self.Searched(text, tuple(search(text))))
        except ChatappError as exc:
            self.post_message(self.Searched(text, (), str(exc)))
        except Exception as exc:  # one line in the view; the app keeps running
            self.post_message(self.Searched(text, (), f"the search failed: {exc}"))

    @work(thread=True, exclusive=True, group="hub-list", exit_on_error=False)
    def _list(self, repo: str, listing: Listing | None = None) -> None:
        from chatapp.models.hub.repo_files import list_repo

        try:
            listing = listing or list_repo(repo)
            gpu_free, ram_free = self.machine()
            rows = picker.rows(listing, self.n_ctx, self.calibration, (gpu_free, ram_free))
        except ChatappError as exc:
            self.post_message(self.Listed(repo, None, str(exc)))
            return
        except Exception as exc:  # one line in the view; the app keeps running
            self.post_message(self.Listed(repo, None, f"cannot list {repo}: {exc}"))
            return
        self.post_message(self.Listed(repo, Ranked(listing, tuple(rows), gpu_free, ram_free)))

    @work(thread=True, exclusive=True, group="hub-calibrate", exit_on_error=False)
    def _calibrate(self) -> None:
        from chatapp.models.hub.speed import calibrate, saved

        found = saved()  # no decode when this machine has one already
        if found is not None:
            self.post_message(self.Calibrated(found))
            return
        try:
            self.post_message(self.Calibrated(calibrate()))
        except Exception as exc:  # no speed column rather than no list
            self.post_message(self.Calibrated(None, str(exc)))

    # ---- messages -----------------------------------------------------------------------------

    def on_get_models_view_searched(self, message: Searched) -> None:
        message.stop()
        if message.text != self._asked[0]:
            return  # a newer search was asked for
        self.found = message.found
        if self._typed_repo:
            return  # the repo's own listing says how it went
        if message.error:
            self._note(message.error, error=True)
        elif not message.found:
            self._note(f"no GGUF repos on the Hub match {message.text!r}")
        else:
            self._note(f"{len(message.found)} repos: Enter on one lists its GGUF files")
            self.query_one("#hub-repos", DataTable).focus()

    def on_get_models_view_listed(self, message: Listed) -> None:
        message.stop()
        if message.repo != self._asked[1]:
            return  # another repo was asked for since
        if message.error:
            self._note(message.error, error=True)
            return
        again = self.ranked is not None and self.ranked.listing.repo == message.repo
        self.ranked = message.ranked
        if not again:
            self.marked = frozenset()
            if message.ranked and message.ranked.rows:
                self.files_table.focus()
        self._note(self.ranked.note(self.n_ctx, self.calibration) if self.ranked else "")

    def on_get_models_view_calibrated(self, message: Calibrated) -> None:
        message.stop()
        self._calibrating = False
        self.calibration = message.calibration
        if message.error:
            self._note(f"no speed estimate: the calibration decode failed ({message.error})")
        elif self.ranked is not None:
            self._note(self.ranked.note(self.n_ctx, self.calibration))
        self._rank_again()

    # ---- drawing ------------------------------------------------------------------------------

    def watch_found(self, found: tuple[Found, ...]) -> None:
        table = self.query_one("#hub-repos", DataTable)
        table.clear()
        for f in found:
            table.add_row(
                cell(f.repo), f"{f.downloads:,}", f"{f.likes:,}", cell(f.updated), key=f.repo
            )

    def watch_ranked(self, ranked: Ranked | None) -> None:
        self.files_table.fill(ranked, self.marked)
        reason = ranked.reason() if ranked else ""
        self.query_one("#hub-reason", Static).update(literal(reason))

    def watch_marked(self, marked: frozenset[str]) -> None:
        self.files_table.fill(self.ranked, marked)

    def watch_download(self, state: DownloadState) -> None:
        line = self.query_one("#hub-progress", Static)
        line.update(literal(state.line or "no download under way"))
        line.set_class(state.error, "error")
        line.set_class(state.running, "running")
        self.query_one("#hub-stop", Button).disabled = not state.running
        for button in self.query("#hub-download, #hub-compare").results(Button):
            button.disabled = state.running

    def watch_n_ctx(self, n_ctx: int) -> None:
        self._rank_again()

    # ---- the user ---------------------------------------------------------------------------

    @on(Input.Submitted, "#hub-search")
    @on(Button.Pressed, "#hub-search-go")
    def _search_asked(self, event: Message) -> None:
        event.stop()
        text = self.query_one("#hub-search", Input).value.strip()
        if not text:
            self._note("type what to search for, e.g. qwen3 4b", error=True)
            return
        try:
            spec = parse_spec(text)
        except ChatappError as exc:
            if "/" in text and not any(c.isspace() for c in text):  # a USER/REPO, mistyped
                self._note(str(exc), error=True)
                return
            spec = None
        self._note(f"searching the Hub for {text!r}…")
        self._typed_repo = spec.repo if spec is not None and spec.kind == "hf" else ""
        self._asked = (text, self._asked[1])
        self._search(text)
        if self._typed_repo:  # its files at once, beside what the search finds
            self._list_repo(self._typed_repo)

    @on(DataTable.RowSelected, "#hub-repos")
    def _repo_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        repo = event.row_key.value
        if repo:
            self._note(f"listing {repo}…")
            self._list_repo(repo)

    @on(DataTable.RowSelected, "#hub-files")
    def _file_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:  # Enter or a click: this file (the button takes the marked)
            self.ask(self.ranked.hub_files([event.row_key.value]) if self.ranked else [])

    @on(Button.Pressed, "#hub-download, #hub-compare, #hub-stop")
    def _button(self, event: Button.Pressed) -> None:
        event.stop()
        actions = {"hub-download": self.action_download, "hub-compare": self.action_compare}
        actions.get(event.button.id or "", self.action_stop)()

    def action_mark(self) -> None:
        name = self.files_table.highlighted()
        if name is None or not self.files_table.has_focus:
            return
        self.marked = self.marked ^ {name}

    def action_download(self) -> None:
        """The marked files, else the highlighted one."""
        files = self._chosen()
        if not files:
            self._note("pick a repo first, then a file", error=True)
            return
        self.ask(files)

    def action_compare(self) -> None:
        """The marked files (else the highlighted one), then F10 on them."""
        files = self._chosen()
        if not files:
            self._note("mark files with space first, then ctrl+d", error=True)
            return
        self.ask(files, compare=True)

    def action_stop(self) -> None:
        self.app.post_message(self.StopAsked(self))

    def ask(self, files: list[HubFile], compare: bool = False) -> None:
        """Ask the App to download these (a typed name in F8 comes here too)."""
        if self.download.running:
            self._note("a download is under way: wait for it, or stop it (ctrl+x)", error=True)
            return
        if not files:
            self._note("pick a repo first, then a file", error=True)
            return
        what = files[0].name if len(files) == 1 else f"{len(files)} files"
        then = ", then F10 compares them" if compare else ""
        self._note(f"downloading {what}{then}: you can close F8 (Esc) and chat meanwhile")
        # to the App itself, which owns the downloads: a message bubbles no further than
        # its sender, and F8 asks through here too
        self.app.post_message(self.DownloadAsked(self, tuple(files), compare))

    def downloaded(self) -> None:
        """Files came into the cache: the 'here' column again."""
        self._rank_again()

    # ---- helpers ----------------------------------------------------------------------------

    def _list_repo(self, repo: str, listing: Listing | None = None) -> None:
        self._asked = (self._asked[0], repo)
        self._list(repo, listing)

    def _rank_again(self) -> None:
        if self.ranked is not None:
            self._list_repo(self.ranked.listing.repo, self.ranked.listing)

    @property
    def files_table(self) -> FileTable:
        return self.query_one("#hub-files", FileTable)

    def _chosen(self) -> list[HubFile]:
        """The marked files in the listed order, else the highlighted one; none while no repo
        is listed."""
        if self.ranked is None:
            return []
        highlighted = self.files_table.highlighted()
        names = self.ranked.in_order(self.marked) or ([highlighted] if highlighted else [])
        return self.ranked.hub_files(names)

    def _note(self, text: str, error: bool = False) -> None:
        note = self.query_one("#hub-note", Static)
        note.update(literal(text))
        note.set_class(error, "error")
