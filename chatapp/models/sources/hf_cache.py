"""The Hugging Face cache (huggingface_hub's layout), located from the environment at call time."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from chatapp.models.sources.found import Found
from chatapp.models.sources.quant_names import listed, quant_from_name, split_names

SOURCE = "huggingface"
_PREFIX = "models--"


def cache_root() -> Path:
    """huggingface_hub's cache folder, as it finds it: $HF_HUB_CACHE, else
    $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    env = os.environ
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if hub:
        return _expand(hub)
    if env.get("HF_HOME"):
        return _expand(env["HF_HOME"]) / "hub"
    return _expand(env.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface" / "hub"


def _expand(text: str) -> Path:
    return Path(os.path.expandvars(text)).expanduser()


def repo_folder(repo: str) -> Path:
    """The cache folder of a model repo: USER/REPO -> models--USER--REPO."""
    return cache_root() / (_PREFIX + repo.replace("/", "--"))


def _snapshots(folder: Path) -> list[Path]:
    """The repo's snapshot folders: the one refs/main names first, then the newest."""
    snaps = folder / "snapshots"
    try:
        others = [p for p in snaps.iterdir() if p.is_dir()]
    except OSError:
        return []
    try:
        main = (folder / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    others.sort(key=lambda p: (p.name != main, -_mtime(p), p.name))
    return others


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _gguf_in(snapshot: Path) -> list[tuple[str, Path]]:
    found = []
    for dirpath, dirnames, filenames in os.walk(snapshot):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(filenames):
            if name.lower().endswith(".gguf"):
                path = here / name
                found.append((path.relative_to(snapshot).as_posix(), path))
    return found


def cached_ggufs(repo: str) -> list[tuple[str, Path]]:
    """(name in the repo, snapshot file) of every cached *.gguf of a repo, each name once:
    from the snapshot refs/main names first, then from the others, newest first. Broken links
    (a blob that was deleted) are left out."""
    seen: set[str] = set()
    found = []
    for snapshot in _snapshots(repo_folder(repo)):
        for name, path in _gguf_in(snapshot):
            if name in seen or not path.is_file():
                continue
            seen.add(name)
            found.append((name, path))
    return found


def _repos() -> list[str]:
    try:
        folders = sorted(p.name for p in cache_root().iterdir() if p.name.startswith(_PREFIX))
    except OSError:
        return []
    return [name[len(_PREFIX) :].replace("--", "/") for name in folders]


def _missing_parts(name: str, names: set[str]) -> str:
    """A note naming the parts of a split model that are not cached ("" when all are)."""
    parts = split_names(name)
    missing = [str(k) for k, part in enumerate(parts, 1) if part not in names]
    return f"part {', '.join(missing)} of {len(parts)} not in the cache" if missing else ""


def all_cached() -> list[Found]:
    """Every model GGUF in the cache: one row per file (of a split model its first part; no
    mmproj; a note when some of its parts are not cached), named USER/REPO:QUANT when that
    quant is the repo's only one by that tag, else USER/REPO:FILE.gguf (the path for a repo
    without a USER/)."""
    found = []
    for repo in _repos():
        cached = cached_ggufs(repo)
        names = {name for name, _ in cached}
        files = [(name, path) for name, path in cached if listed(name)]
        tags = Counter(quant_from_name(name) for name, _ in files)
        for name, path in files:
            tag = quant_from_name(name)
            if "/" not in repo:
                spec = str(path)
            elif tag and tags[tag] == 1:
                spec = f"{repo}:{tag}"
            else:
                spec = f"{repo}:{name}"
            found.append(Found(path, SOURCE, spec, _missing_parts(name, names)))
    return found
