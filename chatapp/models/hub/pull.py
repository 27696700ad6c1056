"""USER/REPO[:QUANT] to a file: the Hugging Face cache first (no network at all), else a pull;
an upstream change never downloads again by itself (`pull --update` does)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from chatapp.errors import HubError
from chatapp.models.hub import download
from chatapp.models.hub.client import offline, offline_error
from chatapp.models.hub.repo_files import Listing, Part, RepoFile, choose, group_parts, list_repo
from chatapp.models.sources import hf_cache
from chatapp.models.sources.quant_names import split_names
from chatapp.models.specs import ModelSpec, parse_spec
from chatapp.progress import bytes_text

ProgressFactory = Callable[[str], download.Progress | None]


@dataclass(frozen=True)
class Pulled:
    """A model in the cache after `pull`: its first file (what llama.cpp opens), and what it
    took. resumed_from: bytes already there when this pull began (None: nothing downloaded)."""

    spec: str
    repo: str
    filename: str
    path: Path
    sha256: str
    size_bytes: int
    resumed_from: int | None
    commit: str

    def to_dict(self) -> dict:
        return {
            "spec": self.spec,
            "repo": self.repo,
            "file": self.filename,
            "path": str(self.path),
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "resumed_from": self.resumed_from,
            "commit": self.commit,
        }


def _cached_pick(spec: ModelSpec) -> tuple[RepoFile, dict[str, Path]] | None:
    """The file the spec names among the repo's cached files (no network), whole or not."""
    found = dict(hf_cache.cached_ggufs(spec.repo))
    if not found:
        return None
    files = group_parts([Part(name, 0, "") for name in found])
    try:
        return choose(files, spec.repo, spec.quant, spec.filename), found
    except HubError:
        return None


def _beside(first: Path, name: str) -> Path:
    """A part of a split model where llama.cpp looks for it: beside the first part."""
    return first.parent / PurePosixPath(name).name


def missing_parts(chosen: RepoFile, found: dict[str, Path]) -> list[int]:
    """The part numbers of a cached split model that are not beside its first part (a pull
    that was cut before its last part), [] when it is whole."""
    first = found[chosen.filename]
    names = split_names(chosen.filename)
    return [k for k, name in enumerate(names, 1) if not _beside(first, name).is_file()]


def cached_choice(spec: ModelSpec) -> tuple[RepoFile, dict[str, Path]] | None:
    """The file the spec names among the repo's cached files (no network), all parts there."""
    hit = _cached_pick(spec)
    return hit if hit is not None and not missing_parts(*hit) else None


def find_cached(spec: ModelSpec) -> Path | None:
    """The cached file USER/REPO[:QUANT] names, or None (None too for a split model that is
    only partly here: a pull resumes it)."""
    hit = cached_choice(spec)
    return None if hit is None else hit[1][hit[0].filename]


def incomplete(spec: ModelSpec, missing: list[int], of: int) -> HubError:
    parts = ", ".join(str(k) for k in missing)
    return HubError(
        f"{spec.text} is only partly downloaded (part {parts} of {of} is missing): run "
        f"`chatapp pull {spec.text}` again; it resumes where it stopped"
    )


def _sha_of_cached(path: Path) -> str:
    """The blob's name is its sha256 in huggingface_hub's layout (LFS files)."""
    return path.resolve().name


def pull(
    spec: ModelSpec | str,
    *,
    update: bool = False,
    progress: ProgressFactory | None = None,
    say: Callable[[str], None] | None = None,
    listing: Listing | None = None,
    stop: download.Stop | None = None,
) -> Pulled:
    """The model in the cache: already there (no network unless update), else downloaded or
    resumed. `say` gets one-line notes (resuming, an update's size). Raises HubError, or
    download.Cancelled as soon as `stop` says so (what was downloaded stays)."""
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    if spec.kind != "hf":
        raise HubError(f"{spec.text} is not a Hugging Face model name (USER/REPO[:QUANT])")
    say = say or (lambda line: None)
    hit = cached_choice(spec)
    if hit is not None and not update:
        chosen, found = hit
        path = found[chosen.filename]
        size = sum(_beside(path, name).stat().st_size for name in split_names(path.name))
        commit = path.parent.name if path.parent.parent.name == "snapshots" else ""
        return Pulled(
            spec.text, spec.repo, chosen.filename, path, _sha_of_cached(path), size, None, commit
        )
    if offline():
        raise offline_error(spec.text)
    listing = listing or list_repo(spec.repo)
    chosen = choose(list(listing.files), spec.repo, spec.quant, spec.filename)
    if hit is not None:  # --update
        old = hit[1][hit[0].filename]
        if hit[0].filename == chosen.filename and _sha_of_cached(old) == chosen.parts[0].sha256:
            say(f"{spec.repo}/{chosen.filename} is up to date (commit {listing.commit[:8]})")
        else:
            say(
                f"{spec.repo}/{chosen.filename} changed upstream: downloading "
                f"{bytes_text(chosen.size)} (commit {listing.commit[:8]})"
            )
    return fetch_all(spec.text, listing, chosen, progress, say, stop)


def fetch_all(
    spec_text: str,
    listing: Listing,
    chosen: RepoFile,
    progress: ProgressFactory | None,
    say: Callable[[str], None],
    stop: download.Stop | None = None,
) -> Pulled:
    """Every part of the chosen model (a split GGUF's parts together)."""
    total = chosen.size
    need = sum(
        p.size - _partial_size(listing.repo, p) for p in chosen.parts if not _have(listing.repo, p)
    )
    download.check_disk(
        hf_cache.repo_folder(listing.repo) / "blobs", need, f"{listing.repo}/{chosen.filename}"
    )
    resumed = 0
    results = []
    for part in chosen.parts:
        already = _partial_size(listing.repo, part)
        if already and not _have(listing.repo, part):
            say(f"resuming {part.filename} at {bytes_text(already)} of {bytes_text(part.size)}")
        bar = progress(part.filename) if progress else None
        got = download.fetch(listing.repo, listing.commit, part, bar, stop)
        results.append(got)
        resumed += got.resumed_from or 0
    first = results[0]
    was_fetched = any(r.resumed_from is not None for r in results)
    return Pulled(
        spec_text,
        listing.repo,
        chosen.filename,
        first.path,
        first.sha256,
        total,
        resumed if was_fetched else None,
        listing.commit,
    )


def _partial_size(repo: str, part: Part) -> int:
    p = download.partial_path(repo, part)
    return p.stat().st_size if p.exists() else 0


def _have(repo: str, part: Part) -> bool:
    blob = download.blob_path(repo, part)
    return blob.exists() and blob.stat().st_size == part.size


def resolve_hf(spec: ModelSpec) -> Path:
    """The file to open for USER/REPO[:QUANT]: cached (no network), else pulled with a
    progress bar on stderr, as `ollama run` and `llama-server -hf` do."""
    hit = _cached_pick(spec)
    if hit is not None:
        missing = missing_parts(*hit)
        if missing:
            raise incomplete(spec, missing, len(split_names(hit[0].filename)))
        return hit[1][hit[0].filename]
    from chatapp.progress import bars

    print(f"pulling {spec.text} from the Hugging Face Hub", file=sys.stderr)
    with bars("bytes") as bar:
        pulled = pull(spec, progress=bar, say=lambda line: print(line, file=sys.stderr))
    return pulled.path
