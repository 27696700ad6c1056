"""The Get models view's rows: a repo's files judged for this machine, as cells and words."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import DataTable

from chatapp.models.hub import picker
from chatapp.models.hub.repo_files import Listing
from chatapp.models.hub.speed import Calibration
from chatapp.models.specs import ModelSpec
from chatapp.progress import bytes_text
from chatapp.ui.literal import cell
from chatapp.ui.widgets.hub_downloads import HubFile

# `chatapp pull --list`'s columns, narrower: ✓ marked, ★ recommended; fits here: where it
# runs (GPU or RAM) or "no"; t/s here: the expected decode speed; here: downloaded already
FILE_COLUMNS = ("✓★", "quant", "size", "bits/w", "memory", "fits", "t/s", "here", "file")


@dataclass(frozen=True)
class Ranked:
    """A repo's files judged for this machine, and what they were judged against."""

    listing: Listing
    rows: tuple[picker.QuantRow, ...]
    gpu_free: int | None
    ram_free: int | None

    @property
    def best(self) -> picker.QuantRow | None:
        return next((r for r in self.rows if r.recommended), None)

    def reason(self) -> str:
        """The recommended row and why, in words (as `chatapp pull --list` says it)."""
        best = self.best
        if best is None:
            return "★ none recommended: no file fits in the free memory here"
        return "★ recommended: " + picker.reason(best, self.gpu_free, self.ram_free)

    def note(self, n_ctx: int, calibration: Calibration | None) -> str:
        """One line: how many files, the ctx of the memory column, where t/s comes from."""
        if not self.rows:
            return f"{self.listing.repo} has no GGUF model files"
        cal = calibration
        speed = f"from a {cal.decode_tps:.0f} t/s decode here" if cal else "measuring…"
        return f"{len(self.rows)} files at ctx {n_ctx:,} · t/s: {speed} · space marks"

    def in_order(self, names: frozenset[str]) -> list[str]:
        """These file names in the order the rows list them (the marked files)."""
        return [r.file for r in self.rows if r.file in names]

    def hub_files(self, names: list[str]) -> list[HubFile]:
        """The repo's files of these names (its rows name them), to download."""
        repo = self.listing.repo
        return [
            HubFile(ModelSpec("hf", f"{repo}:{n}", repo=repo, filename=n), self.listing)
            for n in names
        ]


def file_cells(r: picker.QuantRow, marked: bool, bad: str) -> list[str | Text]:
    """One row as `chatapp pull --list` prints it, and a ✓ when it is marked."""
    name = r.file + (f" (+{r.parts - 1} parts)" if r.parts > 1 else "")
    return [
        ("✓" if marked else " ") + ("★" if r.recommended else ""),
        cell(r.quant or "?"),
        bytes_text(r.size_bytes),
        f"{r.bits_per_weight:.2f}" if r.bits_per_weight else "-",
        bytes_text(r.memory_bytes),
        r.where if r.fits else Text("no", style=bad),
        r.speed_text(),
        "yes" if r.downloaded else "",
        cell(name),
    ]


class FileTable(DataTable):
    """The listed repo's files, a row each; a refill keeps the highlighted file, else the
    recommended one."""

    def highlighted(self) -> str | None:
        """The highlighted row's file name (None while the table is empty)."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def fill(self, ranked: Ranked | None, marked: frozenset[str]) -> None:
        """The rows of `ranked` (none when None), ✓ on the marked files."""
        old = self.highlighted()
        self.clear()
        if ranked is None:
            return
        bad = self.app.theme_variables.get("error", "red")
        for r in ranked.rows:
            self.add_row(*file_cells(r, r.file in marked, bad), key=r.file)
        want = old or next((r.file for r in ranked.rows if r.recommended), None)
        if want is not None and want in {r.file for r in ranked.rows}:
            self.move_cursor(row=self.get_row_index(want))
