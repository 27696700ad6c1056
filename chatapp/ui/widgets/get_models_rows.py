"""The Get models view's rows: a repo's files judged for this machine, as cells and words."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from chatapp.models.hub import picker
from chatapp.models.hub.repo_files import Listing
from chatapp.models.hub.speed import Calibration
from chatapp.progress import bytes_text
from chatapp.ui.literal import cell

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
        f"~{r.expected_decode_tps:.0f}" if r.expected_decode_tps else "-",
        "yes" if r.downloaded else "",
        cell(name),
    ]
