"""Where chatapp keeps its config, history, cache and logs (platformdirs, env overrides)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "chatapp"


def _dir(env: str, default: Path) -> Path:
    value = os.environ.get(env)
    return Path(value).expanduser() if value else default


def config_dir() -> Path:
    """Directory of config.toml and user themes (CHATAPP_CONFIG_DIR overrides)."""
    return _dir("CHATAPP_CONFIG_DIR", platformdirs.user_config_path(APP_NAME, appauthor=False))


def config_file() -> Path:
    """The config file (CHATAPP_CONFIG overrides the whole path)."""
    return _dir("CHATAPP_CONFIG", config_dir() / "config.toml")


def data_dir() -> Path:
    """Directory of the history database (CHATAPP_DATA_DIR overrides)."""
    return _dir("CHATAPP_DATA_DIR", platformdirs.user_data_path(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Directory of quantized files, assembled models and logs (CHATAPP_CACHE_DIR overrides)."""
    return _dir("CHATAPP_CACHE_DIR", platformdirs.user_cache_path(APP_NAME, appauthor=False))


def log_dir() -> Path:
    """Directory of worker logs (llama.cpp's stderr), created on demand."""
    path = cache_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_cache_dir() -> Path:
    """Directory where quantized and assembled models are written, created on demand."""
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def steer_dir() -> Path:
    """Directory of control vectors, one folder per model file (`chatapp steer make`)."""
    return data_dir() / "steer"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename (raises OSError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        raise


def expand_user(text: str | Path) -> Path:
    """A path from the user with ~ and ~user expanded; one naming a user this machine lacks
    stays as written, as a shell leaves it (pathlib raises RuntimeError there)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)
