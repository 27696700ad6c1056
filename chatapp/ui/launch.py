"""Build the app for the command line: engine factory, remembered theme, model label."""

from __future__ import annotations

import json
from pathlib import Path

from chatapp import paths
from chatapp.engine.protocol import LoadOptions
from chatapp.ui.app import ChatApp

STATE_FILE = "ui-state.json"


def _state_path() -> Path:
    return paths.config_dir() / STATE_FILE


def load_state() -> dict:
    try:
        return json.loads(_state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def remember(key: str, value) -> None:
    state = load_state()
    state[key] = value
    try:
        _state_path().parent.mkdir(parents=True, exist_ok=True)
        _state_path().write_text(json.dumps(state, indent=2), encoding="utf-8")
    except OSError:
        pass  # remembering a UI choice is best effort


def build_app(options: LoadOptions, server: str | None = None) -> ChatApp:
    if server:
        from chatapp.engine.remote import RemoteEngine

        def factory():
            return RemoteEngine(server)

        label = server
    else:
        from chatapp.engine.local import LocalEngine

        def factory():
            return LocalEngine(options)

        label = Path(options.model_path).name
    return ChatApp(
        factory,
        model_label=label,
        theme_name=load_state().get("theme"),
        remember_theme=lambda name: remember("theme", name),
    )
