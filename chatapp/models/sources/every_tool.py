"""Every GGUF file the other tools keep, gathered from each tool's own reader."""

from __future__ import annotations

from chatapp.models.sources.found import Found, enabled
from chatapp.models.sources.hf_cache import all_cached
from chatapp.models.sources.llamacpp import llamacpp_models
from chatapp.models.sources.lmstudio import lmstudio_models
from chatapp.models.sources.ollama import ollama_models


def other_tools() -> tuple[list[Found], list[str]]:
    """Every GGUF file the other tools keep, and one-line notes about what was skipped."""
    if not enabled():
        return [], []
    found = all_cached()
    in_ollama, notes = ollama_models()
    found += in_ollama + lmstudio_models() + llamacpp_models()
    return found, notes
