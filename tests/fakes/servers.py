"""A small OpenAI-compatible stub server on 127.0.0.1: each test sets the routes it answers."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable

MODELS = {"object": "list", "data": [{"id": "stub-model", "object": "model"}]}


Route = Callable[["Handler", dict], None]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubServer

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        self.server.seen.append((method, self.path, self.headers.get("Authorization"), body))
        route = self.server.routes.get((method, self.path))
        if route is None:
            self.send_json(404, {"detail": "Not Found"})
        else:
            route(self, body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def send_json(self, status: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, chunks: list[str]) -> None:
        """A text/event-stream body delimited by closing the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk.encode())
            self.wfile.flush()
        self.close_connection = True


class StubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes: dict[tuple[str, str], Route] = {
            ("GET", "/v1/models"): lambda h, b: h.send_json(200, MODELS)
        }
        self.seen: list[tuple] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"
