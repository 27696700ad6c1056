"""Interrupted Hub downloads, against the fake Hub: a split model cut before its last part
resumes part by part, and a download asked to stop (quit, F8's stop) stops while it waits for
another pull's lock or hashes, leaving what it had for the next pull to resume."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from fakes.hub import serving
from filelock import FileLock

from chatapp.errors import HubError
from chatapp.models.hub import download
from chatapp.models.hub.pull import find_cached, pull
from chatapp.models.hub.repo_files import Part, list_repo
from chatapp.models.resolve import resolve_spec
from chatapp.models.sources import hf_cache
from chatapp.models.specs import parse_spec

REPO = "test/Split-GGUF"
MB = 1 << 20
ONE = "big-Q8_0-00001-of-00002.gguf"
TWO = "big-Q8_0-00002-of-00002.gguf"


def blob(n: int, seed: int) -> bytes:
    return (bytes([seed]) * 1024 + os.urandom(16)) * (n // 1040) + b"\0" * (n % 1040)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with serving(tmp_path / "hf-hub", monkeypatch) as h:
        yield h


# ---- a split model cut before its last part ------------------------------------------------


def test_a_split_pull_cut_in_part_two_resumes_part_by_part(hub):
    one, two = blob(2 * MB, 1), blob(4 * MB, 2)
    hub.add(REPO, ONE, one)
    second = hub.add(REPO, TWO, two)
    hub.drop_after = 3 * MB  # part 1 (2 MB) comes whole; part 2 is cut at 3 MB
    with pytest.raises(HubError, match="stopped at .* run the same command again; it resumes"):
        pull(f"{REPO}:Q8_0")
    spec = parse_spec(f"{REPO}:Q8_0")
    assert find_cached(spec) is None  # part 1 alone is not the model
    with pytest.raises(HubError) as info:  # opening it by name: one sentence, not llama.cpp's
        resolve_spec(f"{REPO}:Q8_0")
    assert str(info.value) == (
        f"{REPO}:Q8_0 is only partly downloaded (part 2 of 2 is missing): run "
        f"`chatapp pull {REPO}:Q8_0` again; it resumes where it stopped"
    )

    hub.drop_after = None
    served = second.served
    notes: list[str] = []
    got = pull(f"{REPO}:Q8_0", say=notes.append)
    assert got.resumed_from is not None, "a cut split model is not 'already here'"
    assert got.resumed_from >= 3 * MB and got.size_bytes == len(one) + len(two)
    assert f"resuming {TWO} at 3." in notes[0]
    assert second.served - served == len(two) - got.resumed_from  # only what was missing
    assert got.path.name == ONE and (got.path.parent / TWO).read_bytes() == two
    assert resolve_spec(f"{REPO}:Q8_0") == got.path
    again = pull(f"{REPO}:Q8_0")
    assert again.resumed_from is None and again.size_bytes == len(one) + len(two)


def test_parts_must_sit_beside_the_first_one(hub):
    """Part 2 cached under an older commit only: llama.cpp looks beside part 1, so the model
    is not whole in the newer snapshot and a pull completes it there."""
    one, two = blob(MB, 3), blob(MB, 4)
    hub.add(REPO, ONE, one)
    hub.add(REPO, TWO, two)
    old = pull(f"{REPO}:Q8_0")
    hub.new_commit(REPO)
    listing = list_repo(REPO)
    first = next(f for f in listing.files if f.filename == ONE)
    download.fetch(REPO, listing.commit, first.parts[0])  # the new snapshot has part 1 only
    assert (old.path.parent / TWO).exists()
    with pytest.raises(HubError, match=r"only partly downloaded \(part 2 of 2 is missing\)"):
        resolve_spec(f"{REPO}:Q8_0")
    got = pull(f"{REPO}:Q8_0")
    assert got.commit == listing.commit and (got.path.parent / TWO).read_bytes() == two


# ---- a download asked to stop ----------------------------------------------------------------


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    """fn() in a thread; what it returned or raised lands in the dict."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # the test looks at it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _stopped_in(thread: threading.Thread, stop: threading.Event) -> float:
    """Ask to stop, wait (generously) for the thread; the seconds it took."""
    t0 = time.monotonic()
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the download did not stop when asked"
    return time.monotonic() - t0


@contextlib.contextmanager
def another_pull_holds_the_lock(part) -> Iterator[list]:
    """Another process holds the blob's lock (as a second `chatapp pull` would) until the
    block ends; yields a list that grows by one at each try of this process to take it."""
    locks = hf_cache.cache_root() / ".locks" / hf_cache.repo_folder(REPO).name
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(locks / f"{part.sha256}.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    tries: list = []
    acquire = FileLock.acquire
    try:
        assert holder.stdout.readline() == b"held\n"
        with pytest.MonkeyPatch.context() as m:
            m.setattr(
                FileLock, "acquire", lambda lk, *a, **kw: tries.append(1) or acquire(lk, *a, **kw)
            )
            yield tries
    finally:
        holder.kill()
        holder.wait()


HOLD_LOCK = """
import sys
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


def _one_file_with_a_partial(hub) -> tuple[bytes, object, Part]:
    """A repo of one file, of which an earlier pull left the first MB."""
    data = blob(3 * MB, 5)
    hub.add(REPO, "one-Q8_0.gguf", data)
    listing = list_repo(REPO)
    part = listing.files[0].parts[0]
    partial = download.partial_path(REPO, part)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:MB])
    return data, listing, part


def _resumes_from_the_partial(hub, data: bytes, part: Part) -> None:
    assert download.partial_path(REPO, part).read_bytes() == data[:MB]
    assert not [p for _, p, _ in hub.requests if "/resolve/" in p or "/cdn/" in p]
    got = pull(f"{REPO}:Q8_0")
    assert got.resumed_from == MB and got.path.read_bytes() == data


def test_a_wait_for_another_pulls_lock_stops_when_asked(hub):
    data, listing, part = _one_file_with_a_partial(hub)
    stop = threading.Event()
    with another_pull_holds_the_lock(part) as tries:
        thread, out = _in_thread(
            lambda: download.fetch(REPO, listing.commit, part, stop=stop.is_set)
        )
        _wait_for(lambda: len(tries) >= 1)  # it waits for the lock
        took = _stopped_in(thread, stop)
    print(f"stopped {took:.3f} s after it was asked, while waiting for the lock")
    assert isinstance(out.get("error"), download.Cancelled)
    _resumes_from_the_partial(hub, data, part)


@pytest.mark.usefixtures("fresh_dirs")
async def test_quitting_the_app_ends_a_download_that_waits_for_a_lock(hub, monkeypatch):
    """The App cancels its workers when it quits; F8's download sees that while it waits for
    another pull's lock (else the process would live on until the other pull ends)."""
    from helpers import chat_app, wait_until

    from chatapp.models.hub import pull as pulling
    from chatapp.ui.widgets.hub_downloads import HubFile

    data, listing, part = _one_file_with_a_partial(hub)
    ended, out = threading.Event(), {}
    real_pull = pulling.pull

    def watched(*args, **kwargs):
        try:
            return real_pull(*args, **kwargs)
        except BaseException as exc:
            out["error"] = exc
            raise
        finally:
            ended.set()

    monkeypatch.setattr(pulling, "pull", watched)
    with another_pull_holds_the_lock(part) as tries:
        app = chat_app()
        async with app.run_test() as pilot:
            assert app.downloads.start([HubFile(parse_spec(f"{REPO}:Q8_0"), listing)])
            await wait_until(pilot, lambda: len(tries) >= 1)  # it waits for the lock
            t0 = time.monotonic()
        assert ended.wait(timeout=30), "the download went on after the app quit"
        print(f"the download ended {time.monotonic() - t0:.3f} s after the app quit")
    assert isinstance(out.get("error"), download.Cancelled)
    _resumes_from_the_partial(hub, data, part)


class SlowSha256:
    """hashlib's sha256, as from a slow disk: each chunk takes a while; counts the chunks."""

    chunks = 0
    started = threading.Event()

    def __init__(self, *args) -> None:
        self._h = REAL_SHA256(*args)

    def update(self, data) -> None:
        type(self).chunks += 1
        type(self).started.set()
        time.sleep(0.05)
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


REAL_SHA256 = hashlib.sha256


def test_hashing_a_downloaded_file_stops_when_asked_and_the_file_stays(hub, monkeypatch):
    data = blob(24 * MB, 6)
    file = hub.add(REPO, "one-Q8_0.gguf", data)
    listing = list_repo(REPO)
    part = listing.files[0].parts[0]
    stop = threading.Event()
    with monkeypatch.context() as m:
        m.setattr(hashlib, "sha256", SlowSha256)
        fetch = lambda: download.fetch(REPO, listing.commit, part, stop=stop.is_set)  # noqa: E731
        thread, out = _in_thread(fetch)
        assert SlowSha256.started.wait(timeout=60), "the download never came to its sha256"
        took = _stopped_in(thread, stop)
    print(f"stopped {took:.3f} s after it was asked, while hashing")
    chunks = -(-len(data) // (download.CHUNK * 8))
    assert isinstance(out.get("error"), download.Cancelled) and SlowSha256.chunks < chunks
    partial = download.partial_path(REPO, part)
    assert partial.read_bytes() == data and not download.blob_path(REPO, part).exists()
    served = file.served
    got = pull(f"{REPO}:Q8_0")  # resumes at the end: nothing is fetched again, only checked
    assert got.resumed_from == len(data) and file.served == served
    assert got.path.read_bytes() == data
