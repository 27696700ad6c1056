"""The GGUF files other tools keep: the Hugging Face cache, Ollama, LM Studio, llama.cpp."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Set to "0" to skip every other tool's folders (tests set it, or point each tool's own
# variable at an empty folder: HF_HUB_CACHE, OLLAMA_MODELS, LMSTUDIO_MODELS, LLAMA_CACHE).
DISABLE_ENV = "CHATAPP_OTHER_TOOLS"


@dataclass(frozen=True)
class Found:
    """One GGUF file another tool keeps. Only read: chatapp never moves or deletes it."""

    path: Path  # the file as that tool keeps it (may be a link, e.g. an HF snapshot file)
    source: str  # "huggingface", "ollama", "lmstudio" or "llama.cpp"
    spec: str  # what -m takes for it: a name (USER/REPO:QUANT, ollama:NAME:TAG) or the path
    note: str = ""  # what was left out of it, e.g. a vision projector


def enabled() -> bool:
    """False when CHATAPP_OTHER_TOOLS is 0 (or false, no, off)."""
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def other_tools() -> tuple[list[Found], list[str]]:
    """Every GGUF file the other tools keep, and one-line notes about what was skipped."""
    if not enabled():
        return [], []
    from chatapp.models.sources.hf_cache import all_cached
    from chatapp.models.sources.llamacpp import llamacpp_models
    from chatapp.models.sources.lmstudio import lmstudio_models
    from chatapp.models.sources.ollama import ollama_models

    found = all_cached()
    in_ollama, notes = ollama_models()
    found += in_ollama + lmstudio_models() + llamacpp_models()
    return found, notes
