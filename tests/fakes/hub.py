"""A fake Hugging Face Hub on 127.0.0.1: answers what huggingface_hub and chatapp's pull ask
(model info with siblings and LFS sha256, search, HEAD/GET on resolve with X-Repo-Commit,
ETag / X-Linked-Etag / X-Linked-Size, a redirect to another origin for the bytes, Range),
with throttling, a hold (bytes stop flowing until the test releases them), gated repos and
files whose bytes do not match their advertised sha256."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class FakeFile:
    name: str
    source: Path | bytes
    sha256: str = ""  # advertised; the real one by default
    size: int | None = None  # advertised; the real one by default
    served: int = 0  # bytes sent by GET so far

    def data_size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size

    def read(self, start: int, end: int) -> bytes:
        if isinstance(self.source, bytes):
            return self.source[start:end]
        with open(self.source, "rb") as f:
            f.seek(start)
            return f.read(end - start)


@dataclass
class FakeRepo:
    repo: str
    commit: str
    files: dict[str, FakeFile] = field(default_factory=dict)
    gated: bool = False
    downloads: int = 0
    n_params: int = 0


def _sha256(source: Path | bytes) -> str:
    h = hashlib.sha256()
    if isinstance(source, bytes):
        h.update(source)
    else:
        with open(source, "rb") as f:
            while chunk := f.read(1 << 23):
                h.update(chunk)
    return h.hexdigest()


class FakeHub:
    """Start with `with FakeHub() as hub:`; hub.url is the HF_ENDPOINT to use."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.throttle_bps: int | None = None  # bytes per second of each GET of file bytes
        self.fail_status: int | None = None  # every request answers this status
        self.drop_after: int | None = None  # a GET of bytes closes the connection after this
        self.hold_after: int | None = None  # a GET of bytes waits for `release` after this
        self.release = threading.Event()  # set: held GETs go on (set by __exit__ too)
        self.requests: list[tuple[str, str, dict]] = []  # (method, path, headers)
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: str, name: str, source: Path | bytes, **kw) -> FakeFile:
        r = self.repos.setdefault(repo, FakeRepo(repo, hashlib.sha1(repo.encode()).hexdigest()))
        f = FakeFile(name, source, **kw)
        f.sha256 = f.sha256 or _sha256(source)
        r.files[name] = f
        return f

    def new_commit(self, repo: str) -> str:
        r = self.repos[repo]
        r.commit = hashlib.sha1((r.commit + "x").encode()).hexdigest()
        return r.commit

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def cdn(self) -> str:  # another origin for the bytes, as the real Hub's storage is
        return f"http://localhost:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data) -> None:
        self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str, message: str = "") -> None:
        self._send(status, json.dumps({"error": message or code}).encode(), {
            "X-Error-Code": code, "X-Error-Message": message or code,
            "Content-Type": "application/json",
        })  # fmt: skip

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.hub
        url = urlparse(self.path)
        path = unquote(url.path)
        hub.requests.append((self.command, self.path, dict(self.headers)))
        if hub.fail_status:
            return self._send(hub.fail_status, b"server error")
        if path == "/api/models":
            return self._search(parse_qs(url.query))
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m:
            return self._info(m.group(1))
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            return self._resolve(m.group(1), m.group(3))
        m = re.match(r"^/cdn/([^/]+/[^/]+)/(.+)$", path)
        if m:
            return self._bytes(m.group(1), m.group(2))
        self._error(404, "NotFound")

    def _repo(self, name: str) -> FakeRepo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated and not self.headers.get("Authorization"):
            self._error(401, "GatedRepo", "Access to model is restricted")
            return None
        return repo

    def _info(self, name: str) -> None:
        repo = self._repo(name)
        if repo is None:
            return
        siblings = [
            {"rfilename": f.name, "size": f.size or f.data_size(), "blobId": f.sha256[:40],
             "lfs": {"sha256": f.sha256, "size": f.size or f.data_size(), "pointerSize": 134}}
            for f in repo.files.values()
        ]  # fmt: skip
        data = {
            "_id": repo.commit[:24], "id": repo.repo, "modelId": repo.repo, "sha": repo.commit,
            "private": False, "gated": "auto" if repo.gated else False, "downloads": repo.downloads,
            "likes": 0, "tags": ["gguf"], "siblings": siblings,
        }  # fmt: skip
        if repo.n_params:
            data["gguf"] = {"total": repo.n_params}
        self._json(data)

    def _search(self, query: dict) -> None:
        text = (query.get("search") or [""])[0].lower()
        found = sorted(
            (r for r in self.hub.repos.values() if text in r.repo.lower()),
            key=lambda r: -r.downloads,
        )
        self._json([
            {"_id": r.commit[:24], "id": r.repo, "modelId": r.repo, "downloads": r.downloads,
             "likes": 0, "tags": ["gguf"], "private": False}
            for r in found
        ])  # fmt: skip

    def _resolve(self, name: str, filename: str) -> None:
        repo = self._repo(name)
        if repo is None:
            return
        f = repo.files.get(filename)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        size = f.size or f.data_size()
        self._send(302, b"", {
            "Location": f"{self.hub.cdn}/cdn/{name}/{filename}",
            "X-Repo-Commit": repo.commit, "X-Linked-Etag": f'"{f.sha256}"',
            "X-Linked-Size": str(size), "ETag": f'"{f.sha256[:40]}"',
        })  # fmt: skip

    def _bytes(self, name: str, filename: str) -> None:
        hub = self.hub
        f = hub.repos[name].files[filename]
        if self.headers.get("Authorization"):  # must have been dropped on the other origin
            return self._error(400, "AuthorizationLeaked", "Authorization sent to the storage")
        total = f.data_size()
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(re.match(r"bytes=(\d+)-", rng).group(1))
            if start >= total:
                return self._send(416, b"", {"Content-Range": f"bytes */{total}"})
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(total - start))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
        self.end_headers()
        if self.command == "HEAD":
            return
        pos, sent, t0 = start, 0, time.monotonic()
        chunk = 1 << 16
        while pos < total:
            if hub.drop_after is not None and sent >= hub.drop_after:
                self.close_connection = True
                return
            if hub.hold_after is not None and sent >= hub.hold_after:
                hub.release.wait(timeout=120)
            data = f.read(pos, min(total, pos + chunk))
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                return
            pos += len(data)
            sent += len(data)
            f.served += len(data)
            if hub.throttle_bps:
                ahead = sent / hub.throttle_bps - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)


@contextlib.contextmanager
def serving(cache: Path, monkeypatch) -> Iterator[FakeHub]:
    """A fake Hub that huggingface_hub and chatapp talk to, with the Hugging Face cache in
    `cache` (a test's tmp folder) and offline mode off."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub
