"""One file from the Hub into the Hugging Face cache, resumable after any interruption (a
killed process included) and checked against the Hub's sha256 before it is used.

huggingface_hub's own hf_hub_download (1.20 and later) writes a per-process partial file, so a
killed pull starts again from zero, and it never checks the sha256; this module fills those
two gaps and keeps its layout (blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/...,
refs/main, and its lock files), so llama.cpp, transformers and huggingface_hub share the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.errors import HubError
from chatapp.models.hub import safe_names
from chatapp.models.hub.repo_files import Part
from chatapp.models.sources import hf_cache
from chatapp.progress import bytes_text

CHUNK = 1 << 20
DISK_MARGIN = 64 << 20  # bytes left free after a download, at least
LOCK_POLL_S = 0.2  # how often a wait for another pull's lock looks whether to stop
Progress = Callable[[int, int, float, int], None]  # (bytes done, total, seconds, resumed from)
Stop = Callable[[], bool]  # True once the download is to stop (quit, or F8's stop)


class Cancelled(Exception):
    """The download stopped because it was asked to: the partial file stays and resumes."""


@dataclass(frozen=True)
class Fetched:
    """A file in the cache: where, its sha256 and size, and the bytes that were already there
    when this download started (0: a fresh download; None: nothing was downloaded)."""

    path: Path
    sha256: str
    size_bytes: int
    resumed_from: int | None


def blob_path(repo: str, part: Part) -> Path:
    """blobs/<sha256>; HubError when the listing's sha256 is not one (it would be a path)."""
    sha = safe_names.check_sha256(repo, part.filename, part.sha256)
    if not sha:
        raise HubError(f"the Hub gives no sha256 for {repo}/{part.filename}: it cannot be checked")
    blobs = hf_cache.repo_folder(repo) / "blobs"
    return safe_names.inside(blobs / sha, blobs)


def snapshot_path(repo: str, commit: str, filename: str) -> Path:
    """snapshots/<commit>/<file>; HubError when the commit or the name from the listing would
    lead anywhere else."""
    snapshot = hf_cache.repo_folder(repo) / "snapshots" / safe_names.check_commit(repo, commit)
    return safe_names.inside(snapshot / safe_names.check_filename(repo, filename), snapshot)


def partial_path(repo: str, part: Part) -> Path:
    """The partial download: one name per file (not per process), so any later run resumes."""
    return blob_path(repo, part).with_name(part.sha256 + ".incomplete")


@contextlib.contextmanager
def _locked(repo: str, part: Part, stop: Stop | None) -> Iterator[None]:
    """Hold huggingface_hub's own lock for this blob: two pulls (or a pull and
    hf_hub_download) never write the same file at once. The wait for another pull's lock
    ends with Cancelled as soon as `stop` says so."""
    from filelock import FileLock, Timeout

    name = blob_path(repo, part).name + ".lock"
    path = hf_cache.cache_root() / ".locks" / hf_cache.repo_folder(repo).name / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    while True:
        _check(stop)
        try:
            lock.acquire(timeout=LOCK_POLL_S)
            break
        except Timeout:
            continue
    try:
        yield
    finally:
        lock.release()


def _check(stop: Stop | None) -> None:
    if stop is not None and stop():
        raise Cancelled


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


def sha256_of(path: Path, hasher=None, stop: Stop | None = None):
    """The file's hasher (sha256 unless given), read in chunks; Cancelled between two chunks
    as soon as `stop` says so."""
    hasher = hasher or hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 8):
            _check(stop)
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


def fetch(
    repo: str, commit: str, part: Part, progress: Progress | None = None, stop: Stop | None = None
) -> Fetched:
    """The part in the cache (downloaded, or resumed, or already there and verified).
    Cancelled as soon as `stop` says so, while waiting for another pull's lock, hashing or
    downloading; what was downloaded stays and the next call resumes it."""
    from chatapp.models.hub.client import endpoint, hub_errors, token

    blob, partial = blob_path(repo, part), partial_path(repo, part)
    snapshot_path(repo, commit, part.filename)  # refused before any byte when it is no path
    with _locked(repo, part, stop):
        if blob.exists() and blob.stat().st_size == part.size:
            if sha256_of(blob, stop=stop).hexdigest() != part.sha256:
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
            start = _download(url, token(), partial, start, part.size, progress, stop)
        if sha256_of(partial, stop=stop).hexdigest() != part.sha256:
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
    url: str,
    tok: str | None,
    partial: Path,
    start: int,
    size: int,
    progress: Progress | None,
    stop: Stop | None = None,
) -> int:
    """GET from `start` (Range) to the end, appending to the partial file; returns the offset
    it really started at (0 when the server would not resume). Authorization goes to the Hub
    only: httpx drops it on the redirect to the storage's other origin. `stop` is looked at
    after each read from the network (bytes as they come); progress is told each CHUNK."""
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
            done = reported = start
            with open(partial, "ab" if start else "wb") as f:
                try:
                    for chunk in r.iter_bytes():
                        f.write(chunk)
                        done += len(chunk)
                        if progress is not None and (done - reported >= CHUNK or done == size):
                            reported = done
                            progress(done, size, time.perf_counter() - t0, start)
                        _check(stop)
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
