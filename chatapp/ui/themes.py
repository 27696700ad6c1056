"""Theme files (TOML) shipped in themes/ and the user's config dir, turned into Textual themes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from textual.theme import Theme

from chatapp import paths
from chatapp.errors import ChatappError

PACKAGE_THEMES = Path(__file__).resolve().parent.parent / "themes"
DEFAULT_THEME = "chatapp-dark"
# Panel colours every theme must have; a theme file may leave some out.
PANEL_DEFAULTS = {
    "token-a": "#1f3a5a",
    "token-b": "#4a2e52",
    "token-special": "#6b4a12",
    "token-draft": "#5fd7af",  # tokens that came from an accepted draft (speculative decoding)
    "prob-raw": "#8a8a8a",
    "prob-final": "#5fd787",
    "prob-cut": "#ff8787",
    "spark-max": "#5fd787",
    "spark-min": "#5f87af",
}
_FIELDS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)


class ThemeFileError(ChatappError):
    """A theme file that cannot be used; str() names the file and the reason."""


def load_theme(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ThemeFileError(f"theme {path.name}: {exc}") from exc
    if "primary" not in data:
        raise ThemeFileError(f"theme {path.name}: 'primary' is required")
    unknown = set(data) - set(_FIELDS) - {"name", "dark", "variables"}
    if unknown:
        raise ThemeFileError(f"theme {path.name}: unknown key {sorted(unknown)[0]!r}")
    variables = {**PANEL_DEFAULTS, **{k: str(v) for k, v in data.get("variables", {}).items()}}

    def colour(key: str) -> str | None:
        return str(data[key]) if key in data else None

    return Theme(
        name=str(data.get("name", path.stem)),
        primary=str(data["primary"]),
        secondary=colour("secondary"),
        warning=colour("warning"),
        error=colour("error"),
        success=colour("success"),
        accent=colour("accent"),
        foreground=colour("foreground"),
        background=colour("background"),
        surface=colour("surface"),
        panel=colour("panel"),
        boost=colour("boost"),
        dark=bool(data.get("dark", True)),
        variables=variables,
    )


def discover() -> tuple[list[Theme], list[str]]:
    """All themes (shipped, then the user's) and one problem line per file that failed."""
    themes, problems = [], []
    dirs = [PACKAGE_THEMES, paths.config_dir() / "themes"]
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                themes.append(load_theme(path))
            except ThemeFileError as exc:
                problems.append(str(exc))
    return themes, problems


def install(app, wanted: str | None) -> list[str]:
    """Register the shipped and user themes on an app and select `wanted` (else the default);
    each theme file skipped is notified on the app and returned as one line."""
    found, problems = discover()
    for theme in found:
        app.register_theme(theme)
    wanted = wanted or DEFAULT_THEME
    app.theme = wanted if wanted in app.available_themes else DEFAULT_THEME
    for problem in problems:
        app.notify(problem, title="Theme file skipped", severity="warning")
    return problems
