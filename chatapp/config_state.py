"""Remembered UI choices (state.json beside config.toml; the user's file is never rewritten)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chatapp import jsonfile, paths
from chatapp.config import Config, load_config
from chatapp.errors import ChatappError

STATE_NAME = "state.json"


class ConfigError(ChatappError):
    """Remembered UI state could not be saved; str() is one sentence."""


def state_file() -> Path:
    """Where UI choices (such as the theme) are remembered."""
    return paths.config_dir() / STATE_NAME


def load_state() -> dict[str, Any]:
    """The remembered UI choices ({} when there are none or unreadable; a broken file is kept
    aside)."""
    return jsonfile.read_dict(state_file())


def save_state(**values: Any) -> None:
    """Remember some UI choices (merged into the file under its lock, written atomically)."""
    path = state_file()
    try:
        jsonfile.update(path, lambda state: state.update(values))
    except jsonfile.JsonFileError as exc:
        raise ConfigError(f"cannot save the UI choices: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot save {path} ({exc.strerror or exc})") from None


def save_theme(name: str, config: Config | None = None) -> None:
    """Remember the theme picked in the UI (it wins until config.toml's theme is changed)."""
    config = config or load_config()[0]
    save_state(theme=name, theme_config=config.theme)


def effective_theme(config: Config) -> str:
    """The remembered theme, unless config.toml's theme changed since it was picked."""
    state = load_state()
    theme = state.get("theme")
    if isinstance(theme, str) and theme and state.get("theme_config") == config.theme:
        return theme
    return config.theme
