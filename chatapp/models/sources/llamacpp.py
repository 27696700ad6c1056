"""llama.cpp's old flat download cache (`-hf` before it moved to the Hugging Face cache)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from chatapp.models.sources.found import Found
from chatapp.models.sources.quant_names import listed

SOURCE = "llama.cpp"


def cache_dir() -> Path:
    """$LLAMA_CACHE, else llama.cpp's own default: $XDG_CACHE_HOME/llama.cpp or
    ~/.cache/llama.cpp (~/Library/Caches/llama.cpp on macOS)."""
    env = os.environ.get("LLAMA_CACHE")
    if env:
        return Path(env).expanduser()
    if sys.platform == "darwin":
        return Path("~/Library/Caches/llama.cpp").expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "llama.cpp"


def llamacpp_models() -> list[Found]:
    """The model GGUF files directly in the cache (its .json manifests and .etag files are
    not models; no mmproj; of a split model its first part), each named by its path."""
    try:
        files = sorted(p for p in cache_dir().iterdir() if p.is_file())
    except OSError:
        return []
    names = [p for p in files if p.name.lower().endswith(".gguf") and listed(p.name)]
    return [Found(p, SOURCE, str(p)) for p in names]
