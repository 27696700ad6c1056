"""One GGUF file another tool keeps, and the switch that turns every other tool's folders off."""

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
