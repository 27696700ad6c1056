"""A typed model name to a file on this machine, with no network: what F8 and F10 take."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.errors import ChatappError
from chatapp.models.specs import ModelSpec, parse_spec


@dataclass(frozen=True)
class Named:
    """What a typed name stands for here: a file, a Hub model to download first, or why not."""

    path: str = ""  # the file to open ("" when there is none on this machine)
    download: ModelSpec | None = None  # a Hub name that is not downloaded yet
    error: str = ""  # why the name cannot be used, in one sentence


def local_model(text: str) -> Named:
    """A path as it is; ollama:NAME[:TAG] as Ollama's blob; USER/REPO[:QUANT] from the
    Hugging Face cache, else marked for download (never pulled here: no network at all)."""
    from chatapp.models.hub.pull import find_cached
    from chatapp.models.sources.ollama import resolve_ollama

    try:
        spec = parse_spec(text)
        if spec.kind == "path":
            return Named(str(spec.path))
        if spec.kind == "ollama":
            return Named(str(resolve_ollama(spec.name, spec.tag)))
    except ChatappError as exc:  # a bad name, or an Ollama model that is not there
        return Named(error=str(exc))
    path = find_cached(spec)
    return Named(str(path)) if path is not None else Named(download=spec)


def local_path(text: str) -> str:
    """The file a name stands for here, else the text as it was (its error shows later)."""
    return local_model(text).path or text
