"""The user's config.toml as frozen dataclasses; a bad entry falls back to its default, named."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from chatapp import paths
from chatapp.cpus import ThreadCountError, check_threads
from chatapp.sampling import PRESETS, SamplerSettings, SettingsError

CTX_RANGE = (16, 1 << 22)
"""The context sizes taken (tokens), here, by --ctx and by the models screen's ctx field."""
GPU_LAYERS_RANGE = (-1, 100_000)
"""The GPU layer counts taken (-1 = all), here, by --ngl and by the models screen."""
DEFAULT_THEME = "chatapp-dark"


def draft_source(value: str) -> tuple[str, str | None]:
    """What a `draft` value (config key or --draft) asks for: ("ngram", None), ("model", PATH)
    for a draft model file, or ("", None) for none ("" or "off")."""
    value = value.strip()
    if value in ("", "off"):
        return "", None
    if value == "ngram":
        return "ngram", None
    return "model", str(paths.expand_user(value))


@dataclass(frozen=True)
class ServerConfig:
    """One OpenAI-compatible server, from a [servers.NAME] table."""

    url: str
    """Base URL, e.g. "http://127.0.0.1:8080" (http or https)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    model_name: str | None = None
    """Model name to ask the server for (default: the server's own default)."""


@dataclass(frozen=True)
class Config:
    """Everything config.toml can set. Every field has a default; the file may be absent."""

    default_model: str | None = None
    """GGUF file opened when none is given (default: the bundled SmolLM2)."""
    model_dirs: tuple[str, ...] = ()
    """Directories searched for *.gguf files by `chatapp models` and the model picker."""
    n_ctx: int = 4096
    """Context size in tokens, 16 to 4194304 (as --ctx takes)."""
    n_gpu_layers: int = -1
    """Layers offloaded to the GPU; -1 = all, 0 = CPU only; at most 100000 (as --ngl)."""
    threads: int | None = None
    """CPU threads for decoding; None (or 0 in the file) = as `chatapp tune` found, else all the
    CPUs chatapp may use (its affinity, a container's quota). More than those CPUs is kept with
    a warning; more than 4 per CPU (or 256) is refused."""
    flash_attn: bool | None = None
    """Flash attention; None (absent) = tuned, else off on the CPU (on with exact batches),
    and llama.cpp's choice on a GPU."""
    repack: bool | None = None
    """llama.cpp's extra CPU buffer types (AMX, weight repacking); None (absent) = on, unless
    they crashed on this machine."""
    huge_pages: bool | None = None
    """Transparent huge pages for the model worker's large buffers (KV cache); None (absent)
    = on where Linux offers them."""
    exact_batches: bool | None = None
    """On the CPU, attention that computes a batch's rows as it computes one token (flash
    attention over a Q8_0 K cache), so replies with drafts are the replies without, for files of
    F32/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 tensors. None (absent) = from the first reply with drafts on
    (at load with a draft model): at 1,000 tokens of context it decodes at ~0.94x and
    prefills at ~0.8x (llama-bench, docs/speed.md); true = from the start; false = never
    (llama.cpp's other kernels: drafted replies may part from plain ones)."""
    autotune: bool = True
    """Tune on first use: the chat measures flash attention and threads for a file that has
    no saved tune here, in the worker's idle time (replies go first), and applies the best
    without reloading; false = the defaults until `chatapp tune` runs."""
    draft: str = ""
    """Speculative decoding: "ngram" (drafts looked up in the prompt and reply), a GGUF file
    with the model's vocabulary (a draft model), or "" / "off" (one token at a time)."""
    think: bool | None = None
    """Thinking models: reasoning on (true) or off (false) where the chat template has the
    switch (`enable_thinking`); None (absent) = the template's own default."""
    system_prompt: str = ""
    """System prompt of new conversations ("" = none)."""
    theme: str = DEFAULT_THEME
    """UI theme name (a built-in Textual theme or a chatapp theme file)."""
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    """Default sampler settings, from the [sampler] table."""
    presets: dict[str, SamplerSettings] = field(default_factory=dict)
    """User presets from [presets.NAME] tables (fields left out take the built-in defaults)."""
    keymap: dict[str, str] = field(default_factory=dict)
    """[keys] table: key binding id (as the F1 help lists them, e.g. "chat.regenerate") -> key
    (Textual key syntax, e.g. "ctrl+g" or "f1,ctrl+h")."""
    servers: dict[str, ServerConfig] = field(default_factory=dict)
    """Named servers from [servers.NAME] tables."""
    prompts: dict[str, str] = field(default_factory=dict)
    """System prompts by name, from [prompts.NAME] tables (`text = "..."`): `--system @NAME`
    and F2 use them (F2 saves more in prompts.json beside this file: chat/prompts.py)."""

    def all_presets(self) -> dict[str, SamplerSettings]:
        """Built-in presets plus the user's (a user preset replaces a built-in of that name)."""
        return {**PRESETS, **self.presets}


class _Bad(ValueError):
    """One bad value; the message is what follows the key name."""


def url_problem(url: str) -> str:
    """What is wrong with a server's address, as the end of a sentence naming it ('' when
    nothing): the one check of config's [servers.NAME] url and of --server."""
    import httpx

    if not re.match(r"https?://", url):
        return "must start with http:// or https://"
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError) as exc:
        return f"is not a URL ({str(exc).rstrip('.')})"
    if not parsed.host:
        return "names no host (e.g. http://127.0.0.1:8080)"
    if port is not None and not 0 < port < 65536:
        return f"has port {port}, past 65535"
    return ""


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _whole(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"must be a whole number, got {_show(value)}")
        if not low <= value <= high:
            raise _Bad(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {_show(value)}")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"must be a non-empty string, got {_show(value)}")
    return value.strip()


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, got {_show(value)}")
    return value


def _dotted(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A table with its sub-tables flattened: TOML reads `chat.new = "x"` as {"chat": {"new":
    "x"}}, and a binding id such as chat.new is meant."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class _Loader:
    """Reads the parsed TOML, collecting one problem line per bad entry."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.path.name}: {text}")

    def unknown(self, key: str, allowed: list[str]) -> None:
        self.problem(f"unknown key {key} (allowed: {', '.join(sorted(allowed))})")

    def file_path(self, value: Any) -> str:
        p = paths.expand_user(_name(value))
        return str(p if p.is_absolute() else (self.path.parent / p))

    def path_list(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise _Bad(f"must be a list of directories, got {_show(value)}")
        return tuple(self.file_path(v) for v in value)

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            self.problem(f"{key} must be a table ([{key}]), got {_show(value)}")
            return {}
        return value

    def sampler(self, data: dict[str, Any], prefix: str) -> SamplerSettings:
        settings = SamplerSettings()
        allowed = [f.name for f in fields(SamplerSettings)]
        for key, value in data.items():
            if key not in allowed:
                self.unknown(f"{prefix}.{key}", allowed)
                continue
            try:
                settings = settings.with_(**{key: value})
            except SettingsError as exc:
                self.problem(f"{prefix}.{exc}")
        return settings

    def server(self, name: str, data: Any) -> ServerConfig | None:
        where = f"servers.{name}"
        if not isinstance(data, dict):
            self.problem(f"{where} must be a table ([{where}]), got {_show(data)}")
            return None
        allowed = [f.name for f in fields(ServerConfig)]
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in allowed:
                self.unknown(f"{where}.{key}", allowed)
            elif not isinstance(value, str) or not value.strip():
                self.problem(f"{where}.{key} must be a non-empty string, got {_show(value)}")
            else:
                values[key] = value.strip()
        url = values.get("url")
        if url is None:
            if "url" not in data:
                self.problem(f'{where}.url is missing (e.g. url = "http://127.0.0.1:8080")')
            return None
        problem = url_problem(url)
        if problem:
            self.problem(f"{where}.url {problem}, got {_show(url)}")
            return None
        return ServerConfig(**values)

    def threads(self, value: Any) -> int | None:
        """0 = not set; else checked as --threads is (cpus.check_threads): past the hard limit
        a problem and the default, past the usable CPUs a warning and the count kept."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"must be a whole number, got {_show(value)}")
        if value < 0:
            raise _Bad(f"must be 1 or more, or 0 for the default (as tuned, else all), got {value}")
        if value == 0:
            return None
        try:
            warning = check_threads(value)
        except ThreadCountError as exc:
            raise _Bad(str(exc)) from None
        if warning:
            self.problem(f"threads {warning}")
        return value

    def draft(self, value: Any) -> str:
        """ "ngram", "off" (stored as ""), or a model file (relative to the config's folder)."""
        if value in ("ngram", "off", ""):
            return "" if value == "off" else value
        return self.file_path(value)

    def load(self, data: dict[str, Any]) -> Config:
        scalars: dict[str, Callable[[Any], Any]] = {
            "default_model": self.file_path,
            "model_dirs": self.path_list,
            "n_ctx": _whole(*CTX_RANGE),
            "n_gpu_layers": _whole(*GPU_LAYERS_RANGE),
            "threads": self.threads,
            "flash_attn": _flag,
            "repack": _flag,
            "huge_pages": _flag,
            "exact_batches": _flag,
            "autotune": _flag,
            "think": _flag,
            "draft": self.draft,
            "system_prompt": _text,
            "theme": _name,
        }
        tables = ["sampler", "presets", "keys", "servers", "prompts"]
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key in scalars:
                try:
                    values[key] = scalars[key](value)
                except _Bad as exc:
                    self.problem(f"{key} {exc}")
            elif key not in tables:
                self.unknown(key, [*scalars, *tables])
        values["sampler"] = self.sampler(self.table(data, "sampler"), "sampler")
        presets = {}
        for name, table in self.table(data, "presets").items():
            if isinstance(table, dict):
                presets[name] = self.sampler(table, f"presets.{name}")
            else:
                self.problem(f"presets.{name} must be a table ([presets.{name}])")
        keymap = {}
        for action, key in _dotted(self.table(data, "keys")).items():
            if isinstance(key, str) and key.strip():
                keymap[action] = key.strip()
            else:
                self.problem(f'keys.{action} must be a key like "ctrl+q", got {_show(key)}')
        servers = {}
        for name, table in self.table(data, "servers").items():
            server = self.server(name, table)
            if server is not None:
                servers[name] = server
        prompts = {}
        for name, table in self.table(data, "prompts").items():
            text = table.get("text") if isinstance(table, dict) else None
            if not isinstance(text, str) or not text.strip():
                self.problem(f'prompts.{name} must be a table with text = "..." ([prompts.{name}])')
                continue
            for key in set(table) - {"text"}:
                self.unknown(f"prompts.{name}.{key}", ["text"])
            prompts[name] = text
        return Config(**values, presets=presets, keymap=keymap, servers=servers, prompts=prompts)


def load_config(path: Path | None = None) -> tuple[Config, list[str]]:
    """Read config.toml (paths.config_file() by default) into a Config and a list of problems.

    A missing file is no problem. Each bad key or value gives one line naming it and what is
    allowed, and that entry keeps its default; a file that is not valid TOML gives one line with
    the line number, and all defaults.
    """
    path = path or paths.config_file()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config(), []
    except OSError as exc:
        return Config(), [f"{path}: cannot read the config file ({exc.strerror}); using defaults"]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Config(), [f"{path.name}: not UTF-8 text (byte {exc.start}); using defaults"]
    except tomllib.TOMLDecodeError as exc:
        return Config(), [f"{path.name}: invalid TOML: {exc}; using defaults"]
    loader = _Loader(path)
    return loader.load(data), loader.problems
