"""The model picker: found GGUF files or a typed path or name, ctx and GPU layers, card, fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.validation import Integer
from textual.widgets import Button, DataTable, Input, Label, Static, TabbedContent, TabPane

from chatapp.config import CTX_RANGE
from chatapp.engine.protocol import ALL_GPU_LAYERS, LoadOptions, gpu_layer_total
from chatapp.errors import ModelFileError
from chatapp.models import fit
from chatapp.models.discovery import ModelEntry, discover
from chatapp.ui.literal import literal
from chatapp.ui.screens.model_read import Picked, read_model, read_named
from chatapp.ui.widgets.get_models import GetModelsView
from chatapp.ui.widgets.hub_downloads import DownloadState, HubFile
from chatapp.ui.widgets.model_card import CardView, FitView, machine_memory
from chatapp.ui.widgets.model_list import COLUMNS, ModelList

MIN_CTX, MAX_CTX = CTX_RANGE  # (as --ctx and config.toml's n_ctx)
Machine = Callable[[], tuple[int | None, int | None]]


def int_value(widget: Input) -> int | None:
    """The Input's value when it is a valid integer in range, else None."""
    result = widget.validate(widget.value)
    if result is not None and not result.is_valid:
        return None
    try:
        return int(widget.value)
    except ValueError:
        return None


class ModelPickerScreen(ModalScreen[LoadOptions | None]):
    """Pick a GGUF file and how to load it, or get one from the Hub (the "Get models" tab);
    dismisses with LoadOptions (None on Esc)."""

    DEFAULT_CSS = """
    ModelPickerScreen { align: center middle; }
    ModelPickerScreen > Vertical { width: 95%; max-width: 150; height: 95%;
        border: round $primary; border-title-color: $primary; background: $surface;
        padding: 0 1; }
    ModelPickerScreen #model-table { height: 1fr; min-height: 4; }
    ModelPickerScreen .opts { height: 3; }
    ModelPickerScreen .opts Label { padding: 1 1 0 1; }
    ModelPickerScreen #model-path { width: 1fr; }
    ModelPickerScreen #model-ctx { width: 12; }
    ModelPickerScreen #model-ngl { width: 8; }
    ModelPickerScreen #picker-info { height: auto; max-height: 60%; }
    ModelPickerScreen #picker-card-box { width: 1fr; height: auto; }
    ModelPickerScreen #picker-fit-box { width: 1fr; height: auto; border-left: solid $panel; }
    ModelPickerScreen #picker-buttons { height: 1; margin-top: 1; dock: bottom; }
    ModelPickerScreen #picker-buttons Button { margin-left: 1; }
    ModelPickerScreen #picker-note { width: 1fr; color: $text-muted; }
    ModelPickerScreen #picker-note.error { color: $error; text-style: bold; }
    ModelPickerScreen .section { color: $accent; text-style: bold; padding: 0 1; }
    ModelPickerScreen #picker-tabs { height: 1fr; }
    ModelPickerScreen #picker-tabs TabPane { padding: 0; height: 1fr; }
    ModelPickerScreen #tab-local > Vertical { height: 1fr; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="models.cancel"),
        Binding("ctrl+l", "load", "Load", id="models.load"),
        Binding("ctrl+g", "switch_tab", "Get models / on this machine", id="models.get"),
    ]

    download: reactive[DownloadState] = reactive(DownloadState)
    """The App's Hub download, passed down to the Get models view."""

    class Discovered(Message):
        """The discovery worker found these files."""

        def __init__(self, entries: list[ModelEntry], error: str = "") -> None:
            super().__init__()
            self.entries = entries
            self.error = error

    class ModelRead(Message):
        """One file's header was read."""

        def __init__(self, picked: Picked) -> None:
            super().__init__()
            self.picked = picked

    class MachineMeasured(Message):
        """Free GPU memory (None without a GPU) and available RAM."""

        def __init__(self, gpu_free: int | None, ram_free: int | None) -> None:
            super().__init__()
            self.gpu_free = gpu_free
            self.ram_free = ram_free

    def __init__(
        self,
        current: LoadOptions | None = None,
        dirs: Sequence[str | Path] = (),
        machine: Machine = machine_memory,
        config_dirs: Sequence[str | Path] = (),
        select: str | None = None,
        download: DownloadState | None = None,
    ) -> None:
        super().__init__()
        self.current = current or LoadOptions(model_path="")
        self.select = select
        """A file to highlight in the list (the last one downloaded), else the current one."""
        if download is not None:
            self.set_reactive(ModelPickerScreen.download, download)
        self.dirs = tuple(dirs)
        self.config_dirs = tuple(config_dirs)
        """config.toml's model_dirs: searched too; one that is missing is skipped."""
        self.machine = machine
        self.entries: dict[str, ModelEntry] = {}
        self.picked: Picked | None = None
        self.gpu_free: int | None = None
        self.ram_free: int | None = None
        self._typed = False  # the typed path (not the table row) is what Load takes

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Load a model"
        with box, TabbedContent(id="picker-tabs"):
            with TabPane("On this machine", id="tab-local"), Vertical():
                yield from self._compose_local()
            with TabPane("Get models (ctrl+g)", id="tab-get"):
                yield GetModelsView(self.machine, id="get-models").data_bind(
                    ModelPickerScreen.download
                )

    def _compose_local(self) -> ComposeResult:
        yield ModelList(id="model-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(classes="opts"):
            yield Label("path")
            yield Input(
                placeholder="or type a path, USER/REPO[:QUANT] or ollama:NAME[:TAG]",
                id="model-path",
            )
            yield Label("ctx")
            yield Input(
                str(self.current.n_ctx),
                type="integer",
                validators=[Integer(MIN_CTX, MAX_CTX)],
                id="model-ctx",
            )
            yield Label("GPU layers")
            yield Input(
                str(self.current.n_gpu_layers),
                type="integer",
                validators=[Integer(ALL_GPU_LAYERS, self._max_ngl())],
                tooltip="-1 = all layers",
                id="model-ngl",
            )
        with Horizontal(id="picker-info"):
            with Vertical(id="picker-card-box"):
                yield Static("Model card", classes="section")
                yield CardView(id="picker-card")
            with Vertical(id="picker-fit-box"):
                yield Static("Memory (before loading)", classes="section")
                yield FitView(id="picker-fit")
        with Horizontal(id="picker-buttons"):
            yield Static("finding GGUF files…", id="picker-note")
            yield Button("Load", variant="primary", id="load", compact=True)
            yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        table = self.query_one(ModelList)
        table.add_columns(*COLUMNS)
        table.focus()
        self._sync_ctx()
        self._discover()
        self._measure()

    # ---- workers ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="models-discover", exit_on_error=False)
    def _discover(self) -> None:
        try:
            self.post_message(self.Discovered(discover(self.dirs, config_dirs=self.config_dirs)))
        except ModelFileError as exc:
            self.post_message(self.Discovered(discover(config_dirs=self.config_dirs), str(exc)))

    @work(thread=True, exclusive=True, group="models-machine", exit_on_error=False)
    def _measure(self) -> None:
        self.post_message(self.MachineMeasured(*self.machine()))

    @work(thread=True, exclusive=True, group="models-read", exit_on_error=False)
    def _read(self, asked: str, typed: bool) -> None:
        picked = read_named(asked) if typed else read_model(asked)
        self.post_message(self.ModelRead(replace(picked, asked=asked)))

    # ---- messages -----------------------------------------------------------------------------

    def on_model_picker_screen_discovered(self, message: Discovered) -> None:
        table = self.query_one(ModelList)
        self.entries = {e.path: e for e in message.entries}
        table.fill(message.entries)
        if not table.select_file(self.select):
            table.select_file(self.current.model_path)
        n_ok = sum(e.ok for e in message.entries)
        note = f"{n_ok} loadable GGUF file(s) found; Enter or ctrl+l loads the highlighted one"
        self._note(message.error or note, error=bool(message.error))
        if not message.entries:
            self._note("no GGUF files found: type a path or a name, or get one (ctrl+g)", True)

    def on_model_picker_screen_model_read(self, message: ModelRead) -> None:
        if message.picked.asked != self._wanted():
            return  # the user has moved on
        self._show(message.picked)

    def on_model_picker_screen_machine_measured(self, message: MachineMeasured) -> None:
        self.gpu_free, self.ram_free = message.gpu_free, message.ram_free
        self._update_fit()

    # ---- the user ---------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#model-table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is None:
            return
        self._typed = False
        self._pick(event.row_key.value)

    @on(DataTable.RowSelected, "#model-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self._typed = False
        self.action_load()

    @on(Input.Changed, "#model-path")
    def _path_changed(self, event: Input.Changed) -> None:
        self._typed = bool(event.value.strip())
        self._pick(self._wanted())

    @on(Input.Submitted, "#model-path, #model-ctx, #model-ngl")
    def _submitted(self, event: Input.Submitted) -> None:
        self.action_load()

    @on(Input.Changed, "#model-ctx, #model-ngl")
    def _opts_changed(self, event: Input.Changed) -> None:
        self._update_fit()
        self._sync_ctx()

    @on(Button.Pressed, "#load, #cancel")
    def _button_pressed(self, event: Button.Pressed) -> None:
        self.action_load() if event.button.id == "load" else self.action_cancel()

    @on(TabbedContent.TabActivated, "#picker-tabs")
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "tab-get":
            self.query_one(GetModelsView).activate()
        else:
            self.query_one("#model-table", DataTable).focus()

    def action_switch_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == "tab-get":  # focus in a pane shows it (the focus would pull back)
            self.query_one("#model-table", DataTable).focus()
        else:
            self.query_one("#hub-search", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_load(self) -> None:
        asked = self._wanted()
        if not asked:
            self._note("choose a model in the list, or type a path or a name", error=True)
            return
        picked = self.picked if self.picked and self.picked.asked == asked else None
        picked = picked or (read_named(asked) if self._typed else read_model(asked))
        self._show(picked)
        if picked.download is not None:
            self.query_one(GetModelsView).ask([HubFile(picked.download)])
            self._note(f"downloading {asked}: it is selected here when done (status line)")
            return
        if picked.error:
            self.app.bell()
            return
        ctx, ngl = self._opts()
        if ctx is None:
            self._note(f"ctx must be a whole number from {MIN_CTX} to {MAX_CTX:,}", error=True)
            return
        if ngl is None:
            top = self._max_ngl()
            most = f"to {top}" if top is not None else "or more"
            self._note(f"GPU layers must be a whole number from -1 {most}", error=True)
            return
        options = replace(self.current, model_path=picked.path, n_ctx=ctx, n_gpu_layers=ngl)
        self.dismiss(options)

    def downloaded(self, paths: Sequence[str]) -> None:
        """Files came from the Hub: list them, select the last, and show the list."""
        if not paths:
            return
        self.select = paths[-1]
        self.query_one(GetModelsView).downloaded()
        typed = self.query_one("#model-path", Input)
        if self._typed and self.picked is not None and self.picked.download is not None:
            typed.value = ""  # the name is a file now: the list has it
        self.query_one("#model-table", DataTable).focus()  # shows its tab
        self._discover()

    # ---- helpers ----------------------------------------------------------------------------

    def _wanted(self) -> str:
        """What Load takes: the typed path or name, else the highlighted row's path."""
        typed = self.query_one("#model-path", Input).value.strip()
        if self._typed and typed:
            return typed
        return self.query_one(ModelList).highlighted()

    def _pick(self, asked: str) -> None:
        if not asked:
            self._show(None)
            return
        entry = None if self._typed else self.entries.get(asked)
        if entry is not None and not entry.ok:
            self._show(Picked(asked, error=entry.error))  # known bad: no need to read it again
            return
        self._read(asked, self._typed)

    def _show(self, picked: Picked | None) -> None:
        self.picked = picked
        view = self.query_one(CardView)
        view.error = picked.error if picked else ""
        view.card = picked.card if picked else None
        if picked and picked.card:
            ngl = self.query_one("#model-ngl", Input)
            ngl.validators = [Integer(ALL_GPU_LAYERS, self._max_ngl())]
            ngl.validate(ngl.value)
        load = self.query_one("#load", Button)
        load.disabled = picked is None or bool(picked.error)
        load.label = "Download" if picked and picked.download else "Load"
        if picked and picked.download:
            self._note(
                f"{picked.asked} is not on this machine: Enter downloads it from the Hub "
                "(progress in the status line)"
            )
        elif picked and picked.error:
            self._note("this file cannot be loaded (see why above): choose another", error=True)
        elif picked:
            self._note(f"{Path(picked.path).name}: Enter or ctrl+l loads it")
        self._update_fit()

    def _max_ngl(self) -> int | None:
        """The most GPU layers the picked file has; no limit before one is picked."""
        card = self.picked.card if self.picked else None
        return gpu_layer_total(card.n_layers) if card else None

    def _opts(self) -> tuple[int | None, int | None]:
        """The typed ctx and GPU layers, each None while it is not a valid number."""
        ctx = int_value(self.query_one("#model-ctx", Input))
        return ctx, int_value(self.query_one("#model-ngl", Input))

    def _sync_ctx(self) -> None:
        """The Get models view computes memory at the ctx typed here."""
        ctx = self._opts()[0]
        if ctx is not None:
            self.query_one(GetModelsView).n_ctx = ctx

    def _update_fit(self) -> None:
        view = self.query_one(FitView)
        picked = self.picked
        shape = picked.shape if picked else None
        ctx, ngl = self._opts()
        if picked is None or shape is None or ctx is None or ngl is None:
            view.report = None
            return
        view.trained_ctx = picked.card.context_length if picked.card else 0
        view.report = fit.fit_report(shape, ctx, ngl, self.gpu_free, self.ram_free)

    def _note(self, text: str, error: bool = False) -> None:
        note = self.query_one("#picker-note", Static)
        note.update(literal(text))
        note.set_class(error, "error")
