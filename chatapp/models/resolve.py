"""A model name to a file on disk: paths as they are, Ollama's blobs, the Hugging Face cache
(pulled first when it is not there and the network may be used), or, with no network at all,
what this machine has (what F8 and F10 take)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chatapp.errors import ChatappError
from chatapp.models.specs import ModelSpec, parse_spec


def _path_or_ollama(spec: ModelSpec) -> Path | None:
    """The file of a path (as it is) or of ollama:NAME[:TAG] (Ollama's blob; ModelFileError
    when Ollama lacks it); None for a Hub name."""
    if spec.kind == "path":
        return spec.path
    if spec.kind == "ollama":
        from chatapp.models.sources.ollama import resolve_ollama

        return resolve_ollama(spec.name, spec.tag)
    return None


def resolve_spec(text: str) -> Path:
    """The file a model name stands for (see specs.parse_spec). Raises ModelFileError or
    UsageError with one sentence saying what is missing."""
    spec = parse_spec(text)
    found = _path_or_ollama(spec)
    if found is not None:
        return found
    from chatapp.models.hub.pull import resolve_hf

    return resolve_hf(spec)


@dataclass(frozen=True)
class Named:
    """What a typed name stands for here: a file, a Hub model to download first, or why not."""

    path: str = ""  # the file to open ("" when there is none on this machine)
    download: ModelSpec | None = None  # a Hub name that is not downloaded yet
    error: str = ""  # why the name cannot be used, in one sentence


def local_model(text: str) -> Named:
    """A path as it is; ollama:NAME[:TAG] as Ollama's blob; USER/REPO[:QUANT] from the
    Hugging Face cache, else marked for download (never pulled here: no network at all)."""
    try:
        spec = parse_spec(text)
        found = _path_or_ollama(spec)
    except ChatappError as exc:  # a bad name, or an Ollama model that is not there
        return Named(error=str(exc))
    if found is not None:
        return Named(str(found))
    from chatapp.models.hub.pull import find_cached

    path = find_cached(spec)
    return Named(str(path)) if path is not None else Named(download=spec)


def local_path(text: str) -> str:
    """The file a name stands for here, else the text as it was (its error shows later)."""
    return local_model(text).path or text
