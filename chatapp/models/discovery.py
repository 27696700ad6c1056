"""Find GGUF files: bundled, the cache, folders, other tools'; invalid ones keep their error."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from chatapp import paths
from chatapp.errors import ModelFileError
from chatapp.gguf.header import inspect
from chatapp.models import bundled
from chatapp.models.sources.every_tool import other_tools

MAX_DEPTH = 4  # folder levels searched below each given folder


@dataclass(frozen=True)
class ModelEntry:
    """One GGUF file found on disk."""

    path: str
    # "bundled", "cache", "folder", or another tool's: "huggingface", "ollama", "lmstudio",
    # "llama.cpp"
    source: str
    size_bytes: int
    name: str = ""
    architecture: str = ""
    quant: str = ""
    n_params: int = 0
    has_chat_template: bool = False
    error: str = ""  # why the file cannot be loaded; empty when it is valid
    spec: str = ""  # what -m takes: a name (USER/REPO:QUANT, ollama:NAME:TAG) or the path
    note: str = ""  # what a plain load leaves out, e.g. an Ollama model's vision projector

    def __post_init__(self) -> None:
        if not self.spec:
            object.__setattr__(self, "spec", self.path)

    @property
    def ok(self) -> bool:
        return not self.error

    def to_dict(self) -> dict:
        return asdict(self)


def entry(path: str | Path, source: str, spec: str = "", note: str = "") -> ModelEntry:
    """Describe one file from its header alone (never raises for a bad file); spec defaults to
    the path."""
    p = Path(path)
    spec = spec or str(p)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    try:
        card = inspect(p)
    except ModelFileError as exc:
        return ModelEntry(str(p), source, size, p.stem, error=str(exc), spec=spec, note=note)
    return ModelEntry(
        str(p),
        source,
        size,
        name=card.name,
        architecture=card.architecture,
        quant=card.quant,
        n_params=card.n_params,
        has_chat_template=card.has_chat_template,
        spec=spec,
        note=note,
    )


def gguf_files(folder: str | Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """*.gguf files under a folder (hidden folders skipped), sorted."""
    root = Path(folder)
    found = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if len(here.parts) - base_depth >= max_depth:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found += [here / f for f in filenames if f.lower().endswith(".gguf")]
    return sorted(found)


def bundled_files() -> list[Path]:
    """The bundled models that are installed (gemma only once assembled in the cache)."""
    files = []
    try:
        files.append(bundled.smollm2_path())
    except bundled.BundledModelMissing:
        pass
    gemma = bundled.gemma_path(assemble=False)
    if gemma is not None:
        files.append(gemma)
    return files


def _not_a_folder(folder: Path) -> str:
    what = "is not a folder" if folder.exists() else "does not exist"
    return f"cannot list models in {folder}: it {what}"


def missing_dirs(dirs: Iterable[str | Path]) -> list[str]:
    """One line for each of these folders that cannot be searched."""
    folders = [paths.expand_user(d) for d in dirs]
    return [_not_a_folder(f) for f in folders if not f.is_dir()]


def discover(
    dirs: Iterable[str | Path] = (),
    include_cache: bool = True,
    include_bundled: bool = True,
    config_dirs: Iterable[str | Path] = (),
    include_other_tools: bool = True,
) -> list[ModelEntry]:
    """Every GGUF file found, each once (see discover_with_notes)."""
    return discover_with_notes(
        dirs, include_cache, include_bundled, config_dirs, include_other_tools
    )[0]


def discover_with_notes(
    dirs: Iterable[str | Path] = (),
    include_cache: bool = True,
    include_bundled: bool = True,
    config_dirs: Iterable[str | Path] = (),
    include_other_tools: bool = True,
) -> tuple[list[ModelEntry], list[str]]:
    """Every GGUF file found, each real file once (links resolved): bundled first, then the
    cache, the folders, and the files other tools keep (Hugging Face cache, Ollama, LM Studio,
    llama.cpp); and one-line notes on what the other tools' scan skipped.

    A folder in `dirs` that cannot be searched is an error; one in `config_dirs` (config's
    model_dirs) is skipped (see missing_dirs)."""
    folders = [paths.expand_user(d) for d in dirs]
    for folder in folders:
        if not folder.is_dir():
            raise ModelFileError(_not_a_folder(folder))
    folders += [f for f in (paths.expand_user(d) for d in config_dirs) if f.is_dir()]
    sources: list[tuple[Path, str, str, str]] = []  # path, source, spec, note
    if include_bundled:
        sources += [(p, "bundled", "", "") for p in bundled_files()]
    if include_cache:
        sources += [(p, "cache", "", "") for p in gguf_files(paths.models_cache_dir())]
    for folder in folders:
        sources += [(p, "folder", "", "") for p in gguf_files(folder)]
    notes: list[str] = []
    if include_other_tools:
        found, notes = other_tools()
        sources += [(f.path, f.source, f.spec, f.note) for f in found]
    seen: set[Path] = set()
    entries = []
    for path, source, spec, note in sources:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        entries.append(entry(path, source, spec, note))
    return entries, notes


def format_entries(entries: list[ModelEntry]) -> str:
    """A plain text table of found models: the last column is what -m takes (a name where
    the file has one, e.g. ollama:qwen3:4b, else its path)."""
    if not entries:
        return "no GGUF files found"
    rows = [("source", "size", "quant", "params", "model")]
    for e in entries:
        size = f"{e.size_bytes / 1024**2:,.0f} MiB"
        params = f"{e.n_params / 1e6:,.0f}M" if e.n_params else "-"
        rows.append((e.source, size, e.quant or "invalid", params, e.spec))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for source, size, quant, params, path in rows:
        cells = (
            source.ljust(widths[0]),
            size.rjust(widths[1]),
            quant.ljust(widths[2]),
            params.rjust(widths[3]),
            path,
        )
        lines.append("  ".join(cells))
    lines += [f"! {e.error}" for e in entries if e.error]
    return "\n".join(lines)
