"""The app's Hub downloads: files pulled one after another in a thread worker of the App (so
closing F8 does not stop them), progress and the end as messages, a stop that keeps the partial."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from textual.app import App
from textual.message import Message
from textual.worker import Worker, WorkerState, get_current_worker

from chatapp.errors import ChatappError
from chatapp.models.hub.download import Cancelled, Progress
from chatapp.models.hub.repo_files import Listing
from chatapp.models.specs import ModelSpec
from chatapp.progress import bytes_text, progress_text

EVERY_S = 0.1  # progress is posted at most this often (the last one always)


@dataclass(frozen=True)
class HubFile:
    """One model to pull: its Hub name, and the repo's listing when the view has it."""

    spec: ModelSpec
    listing: Listing | None = None

    @property
    def name(self) -> str:
        return Path(self.spec.filename).name if self.spec.filename else self.spec.text


@dataclass(frozen=True)
class DownloadState:
    """Where the downloads are: what and how far (`head`, first where the line is narrow),
    the bytes, rate and time left (`detail`), whether one runs, whether it failed."""

    head: str = ""
    detail: str = ""
    running: bool = False
    error: bool = False

    @property
    def line(self) -> str:
        return f"{self.head}: {self.detail}" if self.detail else self.head


class HubDownloads:
    """Runs the downloads F8 asks for, one batch at a time, in the App's thread worker."""

    @dataclass
    class Changed(Message):
        """The download moved on (a newer one replaces an older one)."""

        state: DownloadState

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, HubDownloads.Changed)

    @dataclass
    class Finished(Message):
        """The batch ended: the files now here (all of them, or those before an error or a
        stop), and whether F10 is to compare them."""

        paths: tuple[str, ...]
        compare: bool
        state: DownloadState
        names: tuple[str, ...] = field(default=())

    def __init__(self, app: App) -> None:
        self.app = app
        self.state = DownloadState()
        """The last state posted (F8 shows it when it opens)."""
        self.latest: str | None = None
        """The last file downloaded: F8 selects it."""
        self._stop = threading.Event()
        self._worker: Worker | None = None

    @property
    def running(self) -> bool:
        worker = self._worker
        return worker is not None and worker.state in (WorkerState.PENDING, WorkerState.RUNNING)

    def start(self, files: Sequence[HubFile], compare: bool = False) -> bool:
        """Pull the files one after another (False when a download runs already)."""
        if self.running or not files:
            return False
        self._stop.clear()
        self._worker = self.app.run_worker(
            lambda: self._run(tuple(files), compare),
            name="hub-download",
            group="hub-download",
            thread=True,
            exit_on_error=False,
        )
        return True

    def stop(self) -> bool:
        """Stop the download under way (its partial file stays; the next pull resumes)."""
        if not self.running:
            return False
        self._stop.set()
        return True

    # ---- in the worker's thread ---------------------------------------------------------------

    def _run(self, files: tuple[HubFile, ...], compare: bool) -> None:
        from chatapp.models.hub.pull import pull

        worker = get_current_worker()

        def stopped() -> bool:  # F8's stop, or the App's quit cancelling the worker
            return self._stop.is_set() or worker.is_cancelled

        paths: list[str] = []
        names: list[str] = []
        end = DownloadState()
        for i, f in enumerate(files):
            if stopped():  # stopped between two files
                end = DownloadState(f"stopped before {f.name}")
                break
            count = f" ({i + 1} of {len(files)})" if len(files) > 1 else ""
            where = f"{f.name}{count}"
            self._post(DownloadState(f"↓ {where}", "starting…", running=True))
            seen: dict[str, int] = {}
            try:
                got = pull(
                    f.spec,
                    progress=partial(self._progress, where=where, seen=seen),
                    say=partial(self._say, where),
                    listing=f.listing,
                    stop=stopped,
                )
            except Cancelled:
                done, total = seen.get("done", 0), seen.get("total", 0)
                end = DownloadState(
                    f"stopped {f.name} at {bytes_text(done)} of {bytes_text(total)}: the partial "
                    "file stays; downloading it again resumes there"
                    if done
                    else f"stopped {f.name} before its first byte"
                )
                break
            except ChatappError as exc:
                end = DownloadState(f"{f.name}: {exc}", error=True)
                break
            except Exception as exc:  # shown in one line; the app keeps running
                end = DownloadState(f"{f.name}: the download failed: {exc}", error=True)
                break
            paths.append(str(got.path))
            names.append(Path(got.filename).name)
            end = DownloadState(_done_line(names[-1], got.size_bytes, got.resumed_from))
        if len(paths) > 1 and not end.error and len(paths) == len(files):
            end = DownloadState(f"downloaded {len(paths)} files (sha256 checked)")
        ok = len(paths) == len(files)
        self._post_end(self.Finished(tuple(paths), compare and ok, end, tuple(names)))

    def _say(self, where: str, line: str) -> None:
        self._post(DownloadState(f"↓ {where}", line, running=True))

    def _progress(self, name: str, where: str, seen: dict[str, int]) -> Progress:
        last = [0.0]

        def report(done: int, total: int, seconds: float, resumed_from: int) -> None:
            seen.update(done=done, total=total)
            now = time.monotonic()
            if done < total and now - last[0] < EVERY_S:
                return
            last[0] = now
            pct = f"{100 * done / max(total, 1):.0f}%"
            part = "" if where.startswith(Path(name).name) else f" ({Path(name).name})"
            line = progress_text(done, total, seconds, "bytes", resumed_from)
            self._post(DownloadState(f"↓ {pct} {where}{part}", line, running=True))

        return report

    def _post(self, state: DownloadState) -> None:
        self.app.post_message(self.Changed(state))

    def _post_end(self, message: Finished) -> None:
        self.app.post_message(message)


def _done_line(name: str, size: int, resumed_from: int | None) -> str:
    if resumed_from is None:
        return f"{name} is here already ({bytes_text(size)})"
    resumed = f", resumed from {bytes_text(resumed_from)}" if resumed_from else ""
    return f"downloaded {name} ({bytes_text(size)}{resumed}, sha256 checked)"
