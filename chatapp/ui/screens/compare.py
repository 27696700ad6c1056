"""Compare GGUF files side by side: pick files and a text, quantize, run, reopen past runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Button, Input, SelectionList, Static
from textual.widgets.selection_list import Selection
from textual.worker import Worker, WorkerState

from chatapp.engine.protocol import LoadOptions
from chatapp.errors import ChatappError
from chatapp.models import compare, perplexity, quantize
from chatapp.models.compare_runs import DEFAULT_KLD_BUDGET, best_tradeoff, tradeoff_line
from chatapp.models.compare_runs import export_markdown as export_markdown
from chatapp.models.discovery import ModelEntry, discover, entry
from chatapp.models.resolve import local_path
from chatapp.progress import progress_text
from chatapp.ui.literal import literal
from chatapp.ui.screens.compare_history import PastRunsScreen
from chatapp.ui.widgets.compare_setup import CompareSetup, Setup
from chatapp.ui.widgets.compare_view import (
    CompareTable,
    RepliesView,
    bars_content,
    file_label,
)
from chatapp.ui.widgets.status_line import StatusLine

QUANT_BUTTONS = ("Q8_0", "Q2_K")


class CompareScreen(ModalScreen[None]):
    """Run several GGUF files on one prompt and compare their speed, memory and quality."""

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen > Vertical { width: 100%; height: 100%; border: round $primary;
        border-title-color: $primary; background: $surface; padding: 0 1; }
    CompareScreen #cmp-top { height: 10; }
    CompareScreen #cmp-files { width: 1fr; height: 100%; border: round $panel;
        border-title-color: $accent; }
    CompareScreen #cmp-buttons { width: 26; padding: 0 0 0 1; }
    CompareScreen #cmp-buttons Button { width: 100%; margin-bottom: 1; }
    CompareScreen #cmp-status { height: 1; color: $text-muted; }
    CompareScreen #cmp-status.error { color: $error; text-style: bold; }
    CompareScreen #cmp-best { height: 1; color: $warning; }
    CompareScreen #cmp-bottom { height: 1fr; }
    CompareScreen #cmp-bars-box { width: auto; max-width: 62; padding: 0 1 0 0; }
    CompareScreen #cmp-bars { width: auto; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="compare.close"),
        Binding("ctrl+r", "run", "Run", id="compare.run"),
        Binding("ctrl+s", "export", "Export Markdown", id="compare.export"),
        Binding("ctrl+o", "past", "Past runs", id="compare.past"),
    ]

    result: reactive[compare.CompareResult | None] = reactive(None)
    """The last finished comparison; the table, bars and replies are drawn from it."""
    budget: reactive[float] = reactive(DEFAULT_KLD_BUDGET)
    """Mean KLD a file may lose against the reference and still be the best trade-off."""
    busy: reactive[str] = reactive("")
    """What runs now ("" when idle): buttons that would start work are disabled meanwhile."""

    @dataclass
    class Listed(Message):
        entries: list[ModelEntry]

    @dataclass
    class Progress(Message):
        """compare() started on a file (its progress line)."""

        line: str

    @dataclass
    class Scored(Message):
        """A file's text scoring moved on; a newer one for the same file replaces it."""

        name: str
        done: int
        total: int
        seconds: float

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, CompareScreen.Scored) and message.name == self.name

    @dataclass
    class Done(Message):
        result: compare.CompareResult | None
        error: str = ""

    @dataclass
    class Quantized(Message):
        qtype: str
        result: quantize.QuantizeResult | None
        error: str = ""

    def __init__(
        self,
        source: str | None = None,
        files: Sequence[str] = (),
        dirs: Sequence[str | Path] = (),
        n_threads: int | None = None,
        tokens: int = 32,
        prompt: str = compare.DEFAULT_PROMPT,
        quantize_dir: str | Path | None = None,
        make_engine: compare.EngineMaker | None = None,
        options: LoadOptions | None = None,
    ) -> None:
        super().__init__()
        self.options = options  # each run's GPU layers, threads, flash attention, repack
        self.source = source  # the loaded model: what the quantize buttons start from
        self.files = [local_path(str(f)) for f in files]  # names (USER/REPO:QUANT) too
        self.dirs = tuple(dirs)
        self.n_threads = n_threads
        self.tokens = tokens
        self.prompt = prompt
        self.quantize_dir = quantize_dir
        self.make_engine = make_engine
        self.listed: dict[str, ModelEntry] = {}

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Compare models"
        with box:
            yield CompareSetup(self.prompt, self.tokens, id="cmp-setup")
            with Horizontal(id="cmp-top"):
                files = SelectionList[str](id="cmp-files")
                files.border_title = "files (space toggles)"
                yield files
                with Vertical(id="cmp-buttons"):
                    yield Button("Run (ctrl+r)", variant="primary", id="cmp-run", compact=True)
                    for q in QUANT_BUTTONS:
                        yield Button(f"Quantize to {q}", id=f"cmp-q-{q}", compact=True)
                    yield Button("Export Markdown", id="cmp-export", compact=True, disabled=True)
                    yield Button("Past runs (ctrl+o)", id="cmp-past", compact=True)
            yield StatusLine("finding GGUF files…", id="cmp-status")
            yield CompareTable(id="cmp-table")
            yield Static("", id="cmp-best")
            with Horizontal(id="cmp-bottom"):
                with VerticalScroll(id="cmp-bars-box"):
                    yield Static("", id="cmp-bars")
                yield RepliesView(id="cmp-replies")

    def on_mount(self) -> None:
        self.query_one("#cmp-files").focus()
        self._list()
        self.set_interval(0.5, self._tick)

    # ---- workers ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="compare-list", exit_on_error=False)
    def _list(self) -> None:
        found = discover(self.dirs)
        known = {e.path for e in found}
        extra = [entry(f, "given") for f in [self.source, *self.files] if f and f not in known]
        self.post_message(self.Listed([*found, *extra]))

    @work(thread=True, exclusive=True, group="compare-quantize", exit_on_error=False)
    def _quantize(self, src: str, qtype: str) -> None:
        try:
            result = quantize.quantize(src, qtype, self.quantize_dir, nthread=self.n_threads)
        except ChatappError as exc:
            self.post_message(self.Quantized(qtype, None, str(exc)))
            return
        self.post_message(self.Quantized(qtype, result))

    @work(thread=True, exclusive=True, group="compare-run", exit_on_error=False)
    def _compare(self, files: list[str], setup: Setup) -> None:

        def progress(line: str) -> None:
            self.post_message(self.Progress(line))

        def scoring(name: str) -> perplexity.ChunkProgress:
            def scored(done: int, total: int, seconds: float) -> None:
                self.post_message(self.Scored(name, done, total, seconds))

            return scored

        try:
            result = compare.compare(
                files,
                prompt=setup.prompt,
                tokens=setup.tokens,
                n_threads=self.n_threads,
                options=self.options,
                progress=progress,
                text_file=setup.text,
                text_ctx=setup.ctx,
                text_progress=scoring,
                make_engine=self.make_engine,
            )
        except ChatappError as exc:
            self.post_message(self.Done(None, str(exc)))
            return
        except Exception as exc:  # shown on the screen, which stays usable
            self.post_message(self.Done(None, f"the comparison failed: {exc}"))
            return
        self.post_message(self.Done(result))

    # ---- messages ---------------------------------------------------------------------------

    def on_compare_screen_listed(self, message: Listed) -> None:
        files = self.query_one("#cmp-files", SelectionList)
        chosen = set(files.selected) or {p for p in [self.source, *self.files] if p}
        files.clear_options()
        self.listed = {}
        for e in message.entries:
            self._add_file(e, e.path in chosen)
        n = sum(e.ok for e in message.entries)
        self._line.show(f"{n} loadable file(s); tick 2 or more and press Run")

    def on_compare_screen_quantized(self, message: Quantized) -> None:
        self.busy = ""
        if message.result is None:
            self._line.show(f"quantizing to {message.qtype} failed: {message.error}", error=True)
            self.notify(message.error, title="Quantize failed", severity="error", timeout=10)
            return
        r = message.result
        self._add_file(entry(r.output, "quantized"), True)
        text = f"{Path(r.output).name}: {r.size_bytes / 2**20:.1f} MiB in {r.seconds:.1f} s"
        self._line.show(f"quantized {text}")
        self.notify(f"{text}\n{r.output}", title=f"Quantized to {message.qtype}")
        if r.warning:
            self.notify(r.warning, title="Note", severity="warning")

    def on_compare_screen_progress(self, message: Progress) -> None:
        line = message.line
        path = line.split(": ", 1)[1] if line.startswith("reference: ") else line
        path = path.removeprefix("running ")
        self.query_one(CompareTable).start(path)
        self._line.stage = f"running {Path(path).name}"

    def on_compare_screen_scored(self, message: Scored) -> None:
        line = progress_text(message.done, message.total, message.seconds)
        table = self.query_one(CompareTable)
        for key in table.rows:
            if key.value and Path(key.value).name == message.name:
                table.mark(key.value, line)
        self._line.stage = f"scoring {message.name}: {line}"
        self._tick()

    async def on_compare_screen_done(self, message: Done) -> None:
        self.busy = ""
        if message.result is None:
            self._line.show(f"compare failed: {message.error}", error=True)
            self.notify(message.error, title="Compare failed", severity="error", timeout=10)
            table = self.query_one(CompareTable)
            for key in list(table.rows):
                if key.value is not None:
                    table.mark(key.value, "not run")
            return
        self.result = message.result
        failed = [r for r in message.result.runs if r.error]
        note = f"; {len(failed)} failed: {failed[0].error}" if failed else ""
        saved = f"; saved to {message.result.saved_to}" if message.result.saved_to else ""
        self._line.show(
            f"{len(message.result.runs)} files in {message.result.wall_s:.1f} s{note}{saved}",
            error=bool(failed),
        )

    async def watch_result(self, result: compare.CompareResult | None) -> None:
        if result is None:
            return
        self._draw()
        await self.query_one(RepliesView).show(result.runs)
        self.query_one("#cmp-export", Button).disabled = False

    def watch_budget(self) -> None:
        self._draw()

    def _draw(self) -> None:
        """The table, bars and trade-off line of the result under the current budget."""
        result = self.result
        if result is None or not self.is_mounted:
            return
        best = best_tradeoff(result.runs, self.budget)
        path = best.path if best else None
        self.query_one(CompareTable).show(result, best=path)
        self.query_one("#cmp-bars", Static).update(bars_content(result, best=path))
        self.query_one("#cmp-best", Static).update(literal(tradeoff_line(result, self.budget)))

    def reopen(self, result: compare.CompareResult | None) -> None:
        """Show a saved comparison again (from Past runs): its setup goes back in the fields."""
        if result is None:
            return
        self.query_one(CompareSetup).fill(result)
        self.result = result
        when = result.created[:16].replace("T", " ")
        self._line.show(f"reopened the run of {when} ({len(result.runs)} files); nothing was rerun")

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "cmp-budget":
            return
        if event.validation_result is not None and not event.validation_result.is_valid:
            self._line.show("the KLD budget must be a number, 0 or more", error=True)
            return
        self.budget = float(event.value)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.busy = ""
            error = event.worker.error
            self._line.show(f"{event.worker.name} failed: {error}", error=True)
            self.notify(str(error), title="Error", severity="error", timeout=10)

    def watch_busy(self, busy: str) -> None:
        for button in self.query("#cmp-buttons Button"):
            if button.id != "cmp-export":
                button.disabled = bool(busy)

    # ---- the user -----------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id or ""
        run, export, past = self.action_run, self.action_export, self.action_past
        actions = {"cmp-run": run, "cmp-export": export, "cmp-past": past}
        if bid in actions:
            actions[bid]()
        elif bid.startswith("cmp-q-"):
            self.action_quantize(bid.removeprefix("cmp-q-"))

    def action_run(self) -> None:
        if self.busy:
            self.notify(f"wait: {self.busy}")
            return
        files = list(self.query_one("#cmp-files", SelectionList).selected)
        if len(files) < 2:
            self._line.show("tick at least 2 files to compare", error=True)
            return
        setup = self.query_one(CompareSetup).read()
        if isinstance(setup, str):
            self._line.show(setup, error=True)
            return
        self.query_one(CompareTable).queue(files, text=setup.text is not None)
        self.query_one("#cmp-best", Static).update("")
        self.busy = f"comparing {len(files)} files"
        self._line.start(self.busy)
        self._compare(files, setup)

    def action_quantize(self, qtype: str) -> None:
        if self.busy:
            self.notify(f"wait: {self.busy}")
            return
        files = self.query_one("#cmp-files", SelectionList)
        src = self.source or next(iter(files.selected), None)
        if not src:
            self._line.show("no model to quantize: tick one first", error=True)
            return
        self.busy = f"quantizing {Path(src).name} to {qtype}"
        self._line.start(self.busy)
        self.notify(f"{self.busy}…", title="Quantize")
        self._quantize(src, qtype)

    def action_past(self) -> None:
        if self.busy:
            self.notify(f"wait: {self.busy}")
            return
        self.app.push_screen(PastRunsScreen(), self.reopen)

    def action_export(self) -> None:
        if self.result is None:
            self._line.show("nothing to export yet: run a comparison first", error=True)
            return
        try:
            target = export_markdown(self.result)
        except OSError as exc:
            self.notify(f"cannot write the file: {exc}", title="Export failed", severity="error")
            return
        self.notify(f"saved to {target}", title="Comparison exported")
        self._line.show(f"exported to {target}")

    # ---- helpers ----------------------------------------------------------------------------

    def _add_file(self, e: ModelEntry, selected: bool) -> None:
        files = self.query_one("#cmp-files", SelectionList)
        if e.path in self.listed:
            if selected and e.ok:
                files.select(e.path)
            return
        self.listed[e.path] = e
        files.add_option(Selection(file_label(e), e.path, selected and e.ok, disabled=not e.ok))

    def _tick(self) -> None:
        self._line.tick(self.busy)

    @property
    def _line(self) -> StatusLine:
        return self.query_one("#cmp-status", StatusLine)
