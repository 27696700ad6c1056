"""Ollama's models: each manifest names its GGUF blob; read only, never changed."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from chatapp import jsonfile
from chatapp.errors import ModelFileError
from chatapp.models.sources.found import Found

SOURCE = "ollama"
MODEL_LAYER = "application/vnd.ollama.image.model"
# Layers a plain GGUF load leaves out; each one skipped is noted.
SKIPPED_LAYERS = {
    "application/vnd.ollama.image.projector": "projector",
    "application/vnd.ollama.image.adapter": "adapter",
}
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few hundred bytes
_DIGEST = re.compile(r"sha256[:-][0-9a-f]{64}")
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"


def models_dirs() -> list[Path]:
    """Where Ollama keeps models: $OLLAMA_MODELS alone when set (as Ollama does), else the
    user's ~/.ollama/models and the Linux service's /usr/share/ollama/.ollama/models."""
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path("~/.ollama/models").expanduser(), Path("/usr/share/ollama/.ollama/models")]


def _existing(dirs: list[Path]) -> list[Path]:
    seen, out = set(), []
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


def short_name(host: str, namespace: str, model: str) -> str:
    """The name Ollama shows: model, namespace/model, or host/namespace/model."""
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}"
    return model if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}"


def _parts(name: str, tag: str) -> tuple[str, str, str, str] | None:
    """(host, namespace, model, tag) of a name as Ollama shows it; None when it is not one."""
    parts = name.split("/")
    if len(parts) > 3 or any(p in ("", ".", "..") for p in [*parts, tag]) or "/" in tag:
        return None
    if len(parts) == 1:
        return DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0], tag
    if len(parts) == 2:
        return DEFAULT_HOST, parts[0], parts[1], tag
    return parts[0], parts[1], parts[2], tag


def _dirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _manifests(root: Path) -> Iterator[tuple[str, str, Path]]:
    """(name, tag, manifest file) under manifests/<host>/<namespace>/<model>/<tag>."""
    for host in _dirs(root / "manifests"):
        for namespace in _dirs(host):
            for model in _dirs(namespace):
                name = short_name(host.name, namespace.name, model.name)
                try:
                    tags = sorted(p for p in model.iterdir() if p.is_file())
                except OSError:
                    continue
                for tag in tags:
                    if not tag.name.startswith("."):
                        yield name, tag.name, tag


def _layers(manifest: Path) -> list[dict]:
    """The manifest's layers; ValueError when it is not a manifest (unreadable, too large or
    too deep included: JSON from another tool's folder is read with jsonfile's limits)."""
    data = jsonfile.read(manifest, max_bytes=MAX_MANIFEST_BYTES)  # JsonFileError: a ValueError
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ValueError("no layers")
    return [layer for layer in layers if isinstance(layer, dict)]


def _blob(root: Path, digest: str) -> Path | None:
    """blobs/sha256-<hex>, or blobs/sha256:<hex> as older Ollama releases named them; None
    when the digest is not sha256:<64 hex> (a manifest is data: it names no other path)."""
    if not _DIGEST.fullmatch(digest):
        return None
    blobs = root / "blobs"
    name = digest.replace(":", "-", 1)
    old = blobs / digest
    return old if not (blobs / name).exists() and old.exists() else blobs / name


def _model_digest(layers: list[dict]) -> str:
    for layer in layers:
        if layer.get("mediaType") == MODEL_LAYER and isinstance(layer.get("digest"), str):
            return layer["digest"]
    return ""


def _skipped(layers: list[dict]) -> list[str]:
    return [SKIPPED_LAYERS[t] for t in (x.get("mediaType") for x in layers) if t in SKIPPED_LAYERS]


def ollama_models() -> tuple[list[Found], list[str]]:
    """Every Ollama model whose GGUF blob is on disk, named ollama:NAME:TAG, and a note for
    each layer left out and each manifest that cannot be used."""
    found: list[Found] = []
    notes: list[str] = []
    seen: set[str] = set()
    for root in _existing(models_dirs()):
        for name, tag, manifest in _manifests(root):
            label = f"{name}:{tag}"
            if label in seen:  # the first folder wins, as in resolve_ollama
                continue
            seen.add(label)
            try:
                layers = _layers(manifest)
            except ValueError:
                notes.append(f"ollama: manifest {label} cannot be read ({manifest})")
                continue
            skipped = _skipped(layers)
            notes += [f"ollama: {label}'s {kind} layer skipped" for kind in skipped]
            digest = _model_digest(layers)
            if not digest:
                notes.append(f"ollama: manifest {label} has no model layer")
                continue
            blob = _blob(root, digest)
            if blob is None:
                notes.append(f"ollama: manifest {label} names a blob that is no sha256 digest")
                continue
            if not blob.is_file():
                notes.append(f"ollama: manifest {label} names a blob that is missing ({blob})")
                continue
            note = "; ".join(f"its {kind} layer is not loaded" for kind in skipped)
            found.append(Found(blob, SOURCE, f"ollama:{label}", note))
    return found, notes


def _child(folder: Path, name: str) -> Path | None:
    """folder/name, matched without regard to case when not there exactly."""
    exact = folder / name
    if exact.exists():
        return exact
    try:
        return next((p for p in folder.iterdir() if p.name.casefold() == name.casefold()), None)
    except OSError:
        return None


def _manifest_file(root: Path, parts: tuple[str, ...]) -> Path | None:
    path: Path | None = root / "manifests"
    for part in parts:
        path = _child(path, part) if path is not None else None
    return path if path is not None and path.is_file() else None


def resolve_ollama(name: str, tag: str = "latest") -> Path:
    """The GGUF blob of an Ollama model (NAME as Ollama shows it: model, namespace/model or
    host/namespace/model). Raises ModelFileError with one sentence when it is not there."""
    tag = tag or "latest"
    label = f"{name}:{tag}"
    pull = f"run `ollama pull {label}`"
    dirs = models_dirs()
    parts = _parts(name, tag)
    manifests = ((r, _manifest_file(r, parts)) for r in _existing(dirs)) if parts else iter(())
    for root, manifest in manifests:
        if manifest is None:
            continue
        try:
            digest = _model_digest(_layers(manifest))
        except ValueError:
            raise ModelFileError(
                f"ollama:{label}'s manifest {manifest} cannot be read: {pull} again"
            ) from None
        if not digest:
            raise ModelFileError(f"ollama:{label}'s manifest {manifest} names no model layer")
        blob = _blob(root, digest)
        if blob is None:
            raise ModelFileError(
                f"ollama:{label}'s manifest {manifest} names a blob that is no sha256 digest: "
                f"{pull} again"
            )
        if not blob.is_file():
            raise ModelFileError(
                f"ollama:{label}'s manifest names a blob that is missing ({blob}): {pull} again"
            )
        return blob
    looked = ", ".join(str(d) for d in dirs)
    raise ModelFileError(
        f"ollama:{label} is not among Ollama's models (looked in {looked}): "
        f"{pull} first, or see `chatapp models`"
    )
