"""One file from the Hub into the Hugging Face cache, resumable after any interruption (a
killed process included) and checked against the Hub's sha256 before it is used.

huggingface_hub's own hf_hub_download (1.20 and later) writes a per-process partial file, so a
killed pull starts again from zero, and it never checks the sha256; this module fills those
two gaps and keeps its layout (blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/...,
refs/main, and its lock files), so llama.cpp, transformers and huggingface_hub share the file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chatapp.errors import HubError
from chatapp.models.hub.repo_files import Part
from chatapp.models.sources import hf_cache
from chatapp.progress import bytes_text

CHUNK = 1 << 20
DISK_MARGIN = 64 << 20  # bytes left free after a download, at least
Progress = Callable[[int, int, float, int], None]  # (bytes done, total, seconds, resumed from)


@dataclass(frozen=True)
class Fetched:
    """A file in the cache: where, its sha256 and size, and the bytes that were already there
    when this download started (0: a fresh download; None: nothing was downloaded)."""

    path: Path
    sha256: str
    size_bytes: int
    resumed_from: int | None


def blob_path(repo: str, part: Part) -> Path:
    return hf_cache.repo_folder(repo) / "blobs" / part.sha256


def snapshot_path(repo: str, commit: str, filename: str) -> Path:
    return hf_cache.repo_folder(repo) / "snapshots" / commit / filename


def partial_path(repo: str, part: Part) -> Path:
    """The partial download: one name per file (not per process), so any later run resumes."""
    return blob_path(repo, part).with_name(part.sha256 + ".incomplete")


def _lock(repo: str, part: Part):
    """huggingface_hub's own lock for this blob: two pulls (or a pull and hf_hub_download)
    never write the same file at once."""
    from filelock import FileLock

    path = (
        hf_cache.cache_root() / ".locks" / hf_cache.repo_folder(repo).name / f"{part.sha256}.lock"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def link_snapshot(repo: str, commit: str, part: Part, blob: Path) -> Path:
    """snapshots/<commit>/<file> as a relative link to the blob (huggingface_hub's layout);
    refs/main names the commit."""
    link = snapshot_path(repo, commit, part.filename)
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    try:
        link.symlink_to(os.path.relpath(blob, link.parent))
    except OSError:  # no symlinks here (Windows without developer mode): a copy, as HF does
        shutil.copyfile(blob, link)
    refs = hf_cache.repo_folder(repo) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(commit)
    return link


def sha256_of(path: Path, hasher=None):
    hasher = hasher or hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 8):
            hasher.update(chunk)
    return hasher


def check_disk(folder: Path, needed: int, what: str) -> None:
    """Refuse before the first byte when the disk cannot hold what is left to download."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if needed + DISK_MARGIN > free:
        mount = _mount_point(folder)
        raise HubError(
            f"{what} needs {bytes_text(needed)}, {bytes_text(free)} free on {mount}: free some "
            "space, or point HF_HUB_CACHE at a larger disk"
        )


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path.parent != path:
        path = path.parent
    return path


def discard(repo: str, commit: str, part: Part) -> None:
    """A file that did not match its sha256: the partial, the blob and the snapshot link go,
    or the next call would reuse the bad blob."""
    for p in (
        partial_path(repo, part),
        blob_path(repo, part),
        snapshot_path(repo, commit, part.filename),
    ):
        if p.is_symlink() or p.exists():
            p.unlink()


def fetch(repo: str, commit: str, part: Part, progress: Progress | None = None) -> Fetched:
    """The part in the cache (downloaded, or resumed, or already there and verified)."""
    from chatapp.models.hub.client import endpoint, hub_errors, token

    if not part.sha256:
        raise HubError(f"the Hub gives no sha256 for {repo}/{part.filename}: it cannot be checked")
    blob, partial = blob_path(repo, part), partial_path(repo, part)
    with _lock(repo, part):
        if blob.exists() and blob.stat().st_size == part.size:
            if sha256_of(blob).hexdigest() != part.sha256:
                discard(repo, commit, part)
                raise _mismatch(repo, part)
            link = link_snapshot(repo, commit, part, blob)
            return Fetched(link, part.sha256, part.size, None)
        start = partial.stat().st_size if partial.exists() else 0
        if start > part.size:
            partial.unlink()
            start = 0
        check_disk(blob.parent, part.size - start, f"{repo}/{part.filename}")
        url = f"{endpoint()}/{repo}/resolve/{commit}/{part.filename}"
        with hub_errors(repo, part.filename):
            start = _download(url, token(), partial, start, part.size, progress)
        if sha256_of(partial).hexdigest() != part.sha256:
            discard(repo, commit, part)
            raise _mismatch(repo, part)
        os.replace(partial, blob)
        return Fetched(link_snapshot(repo, commit, part, blob), part.sha256, part.size, start)


def _mismatch(repo: str, part: Part) -> HubError:
    return HubError(
        f"{repo}/{part.filename} did not match the Hub's sha256 and was deleted: run the "
        "same command again to download it afresh"
    )


def _download(
    url: str, tok: str | None, partial: Path, start: int, size: int, progress: Progress | None
) -> int:
    """GET from `start` (Range) to the end, appending to the partial file; returns the offset
    it really started at (0 when the server would not resume). Authorization goes to the Hub
    only: httpx drops it on the redirect to the storage's other origin."""
    import httpx

    headers = {"Authorization": f"Bearer {tok}"} if tok else {}
    if start:
        headers["Range"] = f"bytes={start}-"
    t0 = time.perf_counter()
    timeout = httpx.Timeout(30.0, read=60.0)
    with httpx.Client(follow_redirects=True, timeout=timeout) as client:
        with client.stream("GET", url, headers=headers) as r:
            if r.status_code == 416 and start >= size:  # everything is here already
                return start
            r.raise_for_status()
            if start and r.status_code != 206:  # the server sent the whole file
                start = 0
            done = start
            with open(partial, "ab" if start else "wb") as f:
                try:
                    for chunk in r.iter_bytes(CHUNK):
                        f.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, size, time.perf_counter() - t0, start)
                except httpx.TransportError as exc:  # the connection dropped mid-file
                    raise _stopped(done, size) from exc
                except OSError as exc:  # the disk filled up (or went away) mid-file
                    raise HubError(
                        f"writing {partial.name} failed at {bytes_text(done)} of "
                        f"{bytes_text(size)} ({exc.strerror or exc}): free some space, then run "
                        "the same command again; it resumes where it stopped"
                    ) from exc
                finally:
                    f.flush()
    if done != size:
        raise _stopped(done, size)
    return start


def _stopped(done: int, size: int) -> HubError:
    return HubError(
        f"the download stopped at {bytes_text(done)} of {bytes_text(size)} (the connection "
        "dropped): run the same command again; it resumes where it stopped"
    )
