"""Compare GGUF files side by side: pick files, quantize the current model, run, export."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.validation import Integer
from textual.widgets import Button, Input, Label, SelectionList, Static
from textual.widgets.selection_list import Selection
from textual.worker import Worker, WorkerState

from chatapp import paths
from chatapp.errors import ChatappError
from chatapp.models import compare, quantize
from chatapp.models.discovery import ModelEntry, discover, entry
from chatapp.ui.widgets.compare_view import CompareTable, RepliesView, bars_markup

QUANT_BUTTONS = ("Q8_0", "Q2_K")
MAX_TOKENS = 512


def export_markdown(result: compare.CompareResult, folder: Path | None = None) -> Path:
    """Write the table, the setup and each reply as Markdown; returns the file."""
    folder = folder or paths.cache_dir() / "compare"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}.md"
    lines = [
        f"# Comparison of {len(result.runs)} files",
        "",
        f"Prompt: {result.prompt}  ",
        f"Reference: `{result.reference}`; {result.tokens} tokens generated greedily "
        f"(seed {result.seed}), {result.text_tokens} text tokens scored, "
        f"{result.n_threads} threads, {result.wall_s:.1f} s in all.",
        "",
        compare.to_markdown(result),
        "",
    ]
    lines += [f"- {r.name}: {r.error or r.note}" for r in result.runs if r.error or r.note]
    for r in result.runs:
        lines += ["", f"## {r.name} ({r.quant})", "", r.error or r.text or "(empty reply)"]
    target.write_text("\n".join(lines) + "\n")
    return target


def _size(e: ModelEntry) -> str:
    return f"{e.size_bytes / 2**20:,.1f} MiB"


class CompareScreen(ModalScreen[None]):
    """Run several GGUF files on one prompt and compare their speed, memory and quality."""

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen > Vertical { width: 100%; height: 100%; border: round $primary;
        border-title-color: $primary; background: $surface; padding: 0 1; }
    CompareScreen .opts { height: 1; margin-bottom: 1; }
    CompareScreen .opts Label { padding: 0 1 0 0; }
    CompareScreen #cmp-prompt { width: 1fr; }
    CompareScreen #cmp-tokens { width: 8; }
    CompareScreen #cmp-top { height: 8; }
    CompareScreen #cmp-files { width: 1fr; height: 100%; border: round $panel;
        border-title-color: $accent; }
    CompareScreen #cmp-buttons { width: 26; padding: 0 0 0 1; }
    CompareScreen #cmp-buttons Button { width: 100%; margin-bottom: 1; }
    CompareScreen #cmp-status { height: 1; color: $text-muted; }
    CompareScreen #cmp-status.error { color: $error; text-style: bold; }
    CompareScreen #cmp-bottom { height: 1fr; }
    CompareScreen #cmp-bars { width: auto; max-width: 60; padding: 0 1 0 0; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="compare.close"),
        Binding("ctrl+r", "run", "Run", id="compare.run"),
        Binding("ctrl+s", "export", "Export Markdown", id="compare.export"),
    ]

    result: reactive[compare.CompareResult | None] = reactive(None)
    """The last finished comparison; the table, bars and replies are drawn from it."""
    busy: reactive[str] = reactive("")
    """What runs now ("" when idle): buttons that would start work are disabled meanwhile."""

    class Listed(Message):
        def __init__(self, entries: list[ModelEntry]) -> None:
            super().__init__()
            self.entries = entries

    class Progress(Message):
        """compare() started on a file (its progress line)."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class Done(Message):
        def __init__(self, result: compare.CompareResult | None, error: str = "") -> None:
            super().__init__()
            self.result = result
            self.error = error

    class Quantized(Message):
        def __init__(self, qtype: str, result: quantize.QuantizeResult | None, error: str = ""):
            super().__init__()
            self.qtype = qtype
            self.result = result
            self.error = error

    def __init__(
        self,
        source: str | None = None,
        files: Sequence[str] = (),
        dirs: Sequence[str | Path] = (),
        n_threads: int | None = None,
        tokens: int = 32,
        prompt: str = compare.DEFAULT_PROMPT,
        quantize_dir: str | Path | None = None,
        make_engine: Callable | None = None,
    ) -> None:
        super().__init__()
        self.source = source  # the loaded model: what the quantize buttons start from
        self.files = [str(f) for f in files]
        self.dirs = tuple(dirs)
        self.n_threads = n_threads
        self.tokens = tokens
        self.prompt = prompt
        self.quantize_dir = quantize_dir
        self.make_engine = make_engine
        self.listed: dict[str, ModelEntry] = {}
        self._started = 0.0
        self._stage = ""  # the file compare() runs now

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Compare models"
        with box:
            with Horizontal(classes="opts"):
                yield Label("prompt")
                yield Input(self.prompt, id="cmp-prompt", compact=True)
                yield Label(" tokens")
                yield Input(
                    str(self.tokens),
                    type="integer",
                    validators=[Integer(1, MAX_TOKENS)],
                    id="cmp-tokens",
                    compact=True,
                )
            with Horizontal(id="cmp-top"):
                files = SelectionList[str](id="cmp-files")
                files.border_title = "files (space toggles)"
                yield files
                with Vertical(id="cmp-buttons"):
                    yield Button("Run (ctrl+r)", variant="primary", id="cmp-run", compact=True)
                    for q in QUANT_BUTTONS:
                        yield Button(f"Quantize to {q}", id=f"cmp-q-{q}", compact=True)
                    yield Button("Export Markdown", id="cmp-export", compact=True, disabled=True)
            yield Static("finding GGUF files…", id="cmp-status")
            yield CompareTable(id="cmp-table")
            with Horizontal(id="cmp-bottom"):
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
    def _compare(self, files: list[str], prompt: str, tokens: int) -> None:
        kwargs = {"make_engine": self.make_engine} if self.make_engine else {}
        try:
            result = compare.compare(
                files,
                prompt=prompt,
                tokens=tokens,
                n_threads=self.n_threads,
                progress=lambda line: self.post_message(self.Progress(line)),
                **kwargs,
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
        self._status(f"{n} loadable file(s); tick 2 or more and press Run")

    def on_compare_screen_quantized(self, message: Quantized) -> None:
        self.busy = ""
        if message.result is None:
            self._status(f"quantizing to {message.qtype} failed: {message.error}", error=True)
            self.notify(message.error, title="Quantize failed", severity="error", timeout=10)
            return
        r = message.result
        self._add_file(entry(r.output, "quantized"), True)
        text = f"{Path(r.output).name}: {r.size_bytes / 2**20:.1f} MiB in {r.seconds:.1f} s"
        self._status(f"quantized {text}")
        self.notify(f"{text}\n{r.output}", title=f"Quantized to {message.qtype}")
        if r.warning:
            self.notify(r.warning, title="Note", severity="warning")

    def on_compare_screen_progress(self, message: Progress) -> None:
        line = message.line
        path = line.split(": ", 1)[1] if line.startswith("reference: ") else line
        path = path.removeprefix("running ")
        table = self.query_one(CompareTable)
        for key in list(table.rows):
            if table.get_cell(key, "status") == "running…":
                table.mark(key.value, "ran")
        table.mark(path, "running…")
        self._stage = f"running {Path(path).name}"

    async def on_compare_screen_done(self, message: Done) -> None:
        self.busy = ""
        if message.result is None:
            self._status(f"compare failed: {message.error}", error=True)
            self.notify(message.error, title="Compare failed", severity="error", timeout=10)
            for key in list(self.query_one(CompareTable).rows):
                self.query_one(CompareTable).mark(key.value, "not run")
            return
        self.result = message.result
        failed = [r for r in message.result.runs if r.error]
        note = f"; {len(failed)} failed: {failed[0].error}" if failed else ""
        self._status(
            f"{len(message.result.runs)} files in {message.result.wall_s:.1f} s{note}",
            error=bool(failed),
        )

    async def watch_result(self, result: compare.CompareResult | None) -> None:
        if result is None:
            return
        self.query_one(CompareTable).show(result)
        self.query_one("#cmp-bars", Static).update(bars_markup(result))
        await self.query_one(RepliesView).show(result.runs)
        self.query_one("#cmp-export", Button).disabled = False

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.busy = ""
            error = event.worker.error
            self._status(f"{event.worker.name} failed: {error}", error=True)
            self.notify(str(error), title="Error", severity="error", timeout=10)

    def watch_busy(self, busy: str) -> None:
        for button in self.query("#cmp-buttons Button"):
            if button.id != "cmp-export":
                button.disabled = bool(busy)

    # ---- the user -----------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id or ""
        if bid == "cmp-run":
            self.action_run()
        elif bid == "cmp-export":
            self.action_export()
        elif bid.startswith("cmp-q-"):
            self.action_quantize(bid.removeprefix("cmp-q-"))

    def action_run(self) -> None:
        if self.busy:
            self.notify(f"wait: {self.busy}")
            return
        files = list(self.query_one("#cmp-files", SelectionList).selected)
        tokens_input = self.query_one("#cmp-tokens", Input)
        check = tokens_input.validate(tokens_input.value)
        if len(files) < 2:
            self._status("tick at least 2 files to compare", error=True)
            return
        if check is not None and not check.is_valid:
            self._status(f"tokens must be a whole number from 1 to {MAX_TOKENS}", error=True)
            return
        prompt = self.query_one("#cmp-prompt", Input).value.strip() or compare.DEFAULT_PROMPT
        self.query_one(CompareTable).queue(files)
        self._stage = ""
        self.busy = f"comparing {len(files)} files"
        self._started = time.perf_counter()
        self._status(f"{self.busy}…")
        self._compare(files, prompt, int(tokens_input.value))

    def action_quantize(self, qtype: str) -> None:
        if self.busy:
            self.notify(f"wait: {self.busy}")
            return
        files = self.query_one("#cmp-files", SelectionList)
        src = self.source or next(iter(files.selected), None)
        if not src:
            self._status("no model to quantize: tick one first", error=True)
            return
        self._stage = ""
        self.busy = f"quantizing {Path(src).name} to {qtype}"
        self._started = time.perf_counter()
        self._status(f"{self.busy}…")
        self.notify(f"{self.busy}…", title="Quantize")
        self._quantize(src, qtype)

    def action_export(self) -> None:
        if self.result is None:
            self._status("nothing to export yet: run a comparison first", error=True)
            return
        try:
            target = export_markdown(self.result)
        except OSError as exc:
            self.notify(f"cannot write the file: {exc}", title="Export failed", severity="error")
            return
        self.notify(f"saved to {target}", title="Comparison exported")
        self._status(f"exported to {target}")

    # ---- helpers ----------------------------------------------------------------------------

    def _add_file(self, e: ModelEntry, selected: bool) -> None:
        files = self.query_one("#cmp-files", SelectionList)
        if e.path in self.listed:
            if selected and e.ok:
                files.select(e.path)
            return
        self.listed[e.path] = e
        if e.ok:
            name, folder = escape(Path(e.path).name), escape(str(Path(e.path).parent))
            prompt = f"{name}  [b]{e.quant}[/]  {_size(e)}  [$text-muted]{e.source}: {folder}[/]"
        else:
            prompt = f"[$error]{escape(Path(e.path).name)}: {escape(e.error)}[/]"
        files.add_option(Selection(prompt, e.path, selected and e.ok, disabled=not e.ok))

    def _tick(self) -> None:
        if self.busy:
            stage = f": {self._stage}" if self._stage else ""
            self._status(f"{self.busy}{stage}… {time.perf_counter() - self._started:.0f} s")

    def _status(self, text: str, error: bool = False) -> None:
        line = self.query_one("#cmp-status", Static)
        line.update(text)
        line.set_class(error, "error")
