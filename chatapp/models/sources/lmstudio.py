"""LM Studio's models: plain GGUF files under <publisher>/<model>/, named by their path."""

from __future__ import annotations

import os
from pathlib import Path

from chatapp.models.sources.found import Found
from chatapp.models.sources.quant_names import listed

SOURCE = "lmstudio"
MAX_DEPTH = 4  # <publisher>/<model>/ and a folder or two a repo's files may sit in


def models_dirs() -> list[Path]:
    """$LMSTUDIO_MODELS alone when set (chatapp's own override, for tests and unusual
    installs; LM Studio does not read it), else ~/.lmstudio/models and the older
    ~/.cache/lm-studio/models."""
    env = os.environ.get("LMSTUDIO_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path("~/.lmstudio/models").expanduser(), Path("~/.cache/lm-studio/models").expanduser()]


def _gguf_files(root: Path) -> list[Path]:
    found = []
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.parts) - base
        dirnames[:] = [] if depth >= MAX_DEPTH else sorted(d for d in dirnames if d[0] != ".")
        if depth >= 2:  # files beside <publisher>/ folders are not LM Studio's
            names = (f for f in filenames if f.lower().endswith(".gguf") and listed(f))
            found += [here / f for f in sorted(names)]
    return found


def lmstudio_models() -> list[Found]:
    """Every model GGUF in LM Studio's folders (no mmproj; of a split model its first part).
    LM Studio has no model names chatapp resolves, so the spec is the file's path."""
    found, seen = [], set()
    for root in models_dirs():
        if not root.is_dir() or root.resolve() in seen:
            continue
        seen.add(root.resolve())
        found += [Found(p, SOURCE, str(p)) for p in _gguf_files(root)]
    return found
