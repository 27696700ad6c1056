"""Text from the world (replies, files, names, errors) as Rich `Text`: never read as markup."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import App
from textual.content import Content

from chatapp.textsafe import printable


def literal(text: object, style: str | Style = "") -> Text:
    """`text` as it is: brackets stay brackets, control characters become visible symbols."""
    return Text(printable(str(text)), style=style)


def cell(text: object, style: str | Style = "") -> Text:
    """`literal` for a DataTable cell (no line end: a cell is its text alone)."""
    return Text(printable(str(text)), style=style, end="")


class LiteralApp(App):
    """An App whose notifications and header show their text as it is (they carry file
    names, model names and errors from the world; none of ours is written as markup)."""

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity="information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        super().notify(
            printable(str(message)),
            title=printable(str(title)),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def format_title(self, title: str, sub_title: str) -> Content:
        return super().format_title(printable(title), printable(sub_title))


def template(markup: str, **values: object) -> Content:
    """Our own markup with text from the world in its `$name` places, shown as it is there."""
    return Content.from_markup(markup, **{k: printable(str(v)) for k, v in values.items()})
