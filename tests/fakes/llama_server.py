"""A stand-in for llama-server's /health and /completion on 127.0.0.1 (run as a program, the
arguments llama-server takes): each completion's timings count the completions this process
served before it, as drafted tokens, so a test sees which requests shared a server; a server
started with an n-gram --spec-type writes "drafted", the plain one nothing."""

from __future__ import annotations

import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    served = 0
    content = ""

    def log_message(self, *args) -> None:
        pass

    def _send(self, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send({"status": "ok"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        timings = {"predicted_per_second": 100.0, "draft_n": Handler.served, "draft_n_accepted": 0}
        Handler.served += 1
        self._send({"content": Handler.content, "timings": timings})


def main(argv: list[str]) -> None:
    port = int(argv[argv.index("--port") + 1])
    if "--spec-type" in argv and argv[argv.index("--spec-type") + 1] != "none":
        Handler.content = "drafted"
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
