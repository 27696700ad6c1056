"""The model picker's list of the GGUF files found here, a row each, keyed by path."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable

from chatapp.models.discovery import ModelEntry
from chatapp.ui.literal import cell

COLUMNS = ("file", "quant", "size", "params", "source", "name or path")


class ModelList(DataTable):
    """The found files; an invalid one in the error colour, with why it cannot load."""

    def fill(self, entries: list[ModelEntry]) -> None:
        """These files, replacing the rows there were."""
        self.clear()
        bad = self.app.theme_variables.get("error", "red")
        for e in entries:
            size = f"{e.size_bytes / 2**20:,.1f} MiB"
            params = f"{e.n_params / 1e6:,.0f}M" if e.n_params else "-"
            name = Path(e.path).name
            if e.ok:
                cells = [cell(name), cell(e.quant), size, params, e.source, cell(e.spec)]
            else:
                red = [cell(t, style=bad) for t in (name, "invalid", e.error)]
                cells = [red[0], red[1], size, params, e.source, red[2]]
            self.add_row(*cells, key=e.path)

    def highlighted(self) -> str:
        """The highlighted file's path ("" while the list is empty)."""
        if not self.row_count:
            return ""
        return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value or "")

    def select_file(self, path: str | None) -> bool:
        """Highlight this file's row (the same file by another path counts); False when it
        is not listed."""
        if not path:
            return False
        keys = [str(k.value) for k in self.rows if k.value is not None]
        real = None if path in keys else Path(path).resolve()
        key = path if real is None else next((k for k in keys if Path(k).resolve() == real), None)
        if key is None:
            return False
        self.move_cursor(row=self.get_row_index(key))
        return True
