"""A model name to a file on disk: paths as they are, Ollama's blobs, the Hugging Face cache
(pulled first when it is not there and the network may be used)."""

from __future__ import annotations

from pathlib import Path

from chatapp.models.specs import parse_spec


def resolve_spec(text: str) -> Path:
    """The file a model name stands for (see specs.parse_spec). Raises ModelFileError or
    UsageError with one sentence saying what is missing."""
    spec = parse_spec(text)
    if spec.kind == "path":
        return spec.path
    if spec.kind == "ollama":
        from chatapp.models.sources.ollama import resolve_ollama

        return resolve_ollama(spec.name, spec.tag)
    from chatapp.models.hub.pull import resolve_hf

    return resolve_hf(spec)
