"""Views of a comparison: the figures table with per-file status, bars, and replies side by side."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Static

from chatapp.models.compare_ceilings import order_note
from chatapp.models.compare_format import COLUMNS, table_columns
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.discovery import ModelEntry
from chatapp.ui.literal import cell, literal, template

STATUS = "status"
BAR_WIDTH = 18
NAME_WIDTH = 20
LABEL_WIDTH = 20


BEST = "★"


def _mib(n: int | None) -> float | None:
    return None if n is None else n / 2**20


BARS = (  # (title, getter, format): each scaled to its own largest value
    ("size", lambda r: r.size_bytes / 2**20, "{:.1f} MiB"),
    ("peak RSS", lambda r: _mib(r.peak_rss_bytes), "{:.0f} MiB"),
    ("decode speed", lambda r: r.decode_tps, "{:.1f} t/s"),
    (
        "decode ceiling here (read GB/s / bytes a token)",
        lambda r: r.decode_ceiling_tps,
        "{:.0f} t/s",
    ),
    ("share of the ceiling reached", lambda r: _pct(r.ceiling_share), "{:.0f} %"),
    ("mean KLD vs the reference", lambda r: r.mean_kl, "{:.4f}"),
    ("perplexity", lambda r: r.perplexity, "{:.2f}"),
)


def _pct(share: float | None) -> float | None:
    return None if share is None else share * 100


def cells(r: RunResult, columns: tuple = COLUMNS) -> list[str]:
    """The figures of one run, formatted like `chatapp compare` ("-" where missing)."""
    return ["-" if (v := get(r)) is None else fmt.format(v) for _, get, fmt in columns]


def file_label(e: ModelEntry) -> Content:
    """A file in the pick list: name, quantization, size, where it was found (or its error)."""
    # a name where the file has one (ollama:NAME:TAG: its blob is sha256-...), else the file
    name = e.spec if e.spec and e.spec != e.path else Path(e.path).name
    if not e.ok:
        return template("[$error]$name: $why[/]", name=name, why=e.error)
    return template(
        "$name  [b]$quant[/]  $size  [$text-muted]$source: $folder[/]",
        name=name,
        quant=e.quant,
        size=f"{e.size_bytes / 2**20:,.1f} MiB",
        source=e.source,
        folder=Path(e.path).parent,
    )


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """A file name cut in the middle, so the distinguishing end (…Q8_0.gguf) stays."""
    if len(name) <= width:
        return name
    head = (width - 1) // 2
    return name[:head] + "…" + name[-(width - 1 - head) :]


def status_text(r: RunResult, best: bool = False) -> str:
    """One word or two for a finished run (the full error is shown with its reply)."""
    if r.error:
        return "✗ failed"
    if r.note:
        return "⚠ see note"
    word = "reference" if r.is_reference else "ok"
    return f"{BEST} best, {word}" if best else word


def bar(value: float, top: float, width: int = BAR_WIDTH) -> str:
    """A horizontal bar in eighths of a cell, `value` out of `top`."""
    eighths = int(round(width * 8 * value / top)) if top > 0 else 0
    full, part = divmod(max(eighths, 0), 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


def labels(runs: Sequence[RunResult]) -> list[str]:
    """Short names for the runs: the quantization when every file has its own, else the file."""
    quants = [r.quant for r in runs]
    if len(set(quants)) == len(quants):
        return quants
    return [short_name(r.name, LABEL_WIDTH) for r in runs]


def bars_content(result: CompareResult, best: str | None = None) -> Content:
    """Size, RSS, decode speed, KLD and perplexity as bars, each scaled to its largest value;
    a figure no run has is left out, and `best` (a path) is marked with a star."""
    names = labels(result.runs)
    width = max(len(n) for n in names)
    out: list[Content] = []
    for title, get, fmt in BARS:
        values = [None if r.error else get(r) for r in result.runs]
        if all(v is None for v in values):
            continue
        top = max((v for v in values if v is not None), default=0.0)
        out.append(Content.from_markup(f"[b $accent]{title}[/]"))
        for name, r, v in zip(names, result.runs, values, strict=True):
            if r.error:
                shown = "[$error]failed[/]"
            elif v is None:
                shown = "[$text-muted]-[/]"
            else:
                shown = f"[$spark-max]{bar(v, top)}[/] {fmt.format(v)}"
            mark = f"[$warning]{BEST}[/]" if r.path == best else " "
            out.append(template(f"{mark}$name {shown}", name=name.ljust(width)))
    if any(r.decode_ceiling_tps for r in result.runs):
        out.append(Content(order_note(result.runs)))
    return Content("\n").join(out)


class CompareTable(DataTable):
    """One row per file; the status column (second) says queued, running…, ok or failed."""

    DEFAULT_CSS = """
    CompareTable { height: auto; max-height: 10; }
    """
    running = ""
    """The file compare() runs now ("" before the first)."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self._set_columns(COLUMNS)

    def _set_columns(self, columns: tuple) -> None:
        self.clear(columns=True)
        first, *rest = [header for header, _, _ in columns]
        self.add_column(first, key=first)
        self.add_column(STATUS, key=STATUS)
        for header in rest:
            self.add_column(header, key=header)

    def queue(self, files: Sequence[str], text: bool = False) -> None:
        """Rows for files about to run, figures empty (`text`: with the text-scoring columns)."""
        columns = table_columns(text)
        self._set_columns(columns)
        self.running = ""
        blank = [""] * (len(columns) - 1)
        for path in files:
            self.add_row(cell(short_name(Path(path).name)), "queued", *blank, key=path)

    def mark(self, path: str, status: str) -> None:
        """Set one row's status (a path not in the table is ignored)."""
        if path in self.rows:
            self.update_cell(path, STATUS, status, update_width=True)

    def start(self, path: str) -> None:
        """compare() began on this file: it is running, and the one before it ran."""
        if self.running:
            self.mark(self.running, "ran")
        self.mark(path, "running…")
        self.running = path

    def show(self, result: CompareResult, best: str | None = None) -> None:
        """The figures of a comparison, failures in the error colour, `best` (a path) starred."""
        columns = table_columns(bool(result.text_file))
        self._set_columns(columns)
        bad = self.app.theme_variables.get("error", "red")
        warn = self.app.theme_variables.get("warning", "yellow")
        for r in result.runs:
            status = status_text(r, r.path == best)
            row: list[str | Text] = [cell(short_name(r.name)), status, *cells(r, columns)[1:]]
            if r.error or r.note:
                style = bad if r.error else warn
                row[0] = cell(short_name(r.name), style)
                row[1] = Text(status, style=style, end="")
            self.add_row(*row, key=r.path)


class RepliesView(Horizontal):
    """Each file's greedy reply in its own column."""

    DEFAULT_CSS = """
    RepliesView { height: 1fr; }
    RepliesView > VerticalScroll { width: 1fr; border: round $panel;
        border-title-color: $accent; padding: 0 1; }
    RepliesView > VerticalScroll.failed { border: round $error; }
    RepliesView .reply-text { height: auto; }
    RepliesView .reply-error { color: $error; height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("[$text-muted]the replies appear here when the comparison ends[/]")

    async def show(self, runs: Sequence[RunResult]) -> None:
        """Replace the columns with one per run. Each column is mounted with its text in one
        step: mounting into a column afterwards raced with a second result (or the screen
        closing) removing that column first."""
        await self.remove_children()
        columns = []
        for name, r in zip(labels(runs), runs, strict=True):
            if r.error:
                text = Static(literal(f"✗ {r.error}"), classes="reply-error")
            else:
                reply = r.text or "(empty reply)"
                if r.note:
                    reply = f"{reply}\n\n⚠ {r.note}"
                text = Static(literal(reply), classes="reply-text")
            column = VerticalScroll(text, classes="failed" if r.error else "")
            column.border_title = literal(name + (" (reference)" if r.is_reference else ""))
            columns.append(column)
        if self.is_attached:
            await self.mount_all(columns)
