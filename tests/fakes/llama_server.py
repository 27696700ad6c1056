"""A stand-in for llama-server's /health and /completion on 127.0.0.1 (run as a program, the
arguments llama-server takes): each completion's timings count the completions this process
served before it, as drafted tokens, so a test sees which requests shared a server; a server
started with an n-gram --spec-type writes "drafted", the plain one nothing. A streamed request
(bench's llama-server arm) gets n_predict tokens as server-sent events."""

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
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or "{}")
        timings = {"predicted_per_second": 100.0, "draft_n": Handler.served, "draft_n_accepted": 0}
        Handler.served += 1
        if body.get("stream"):
            self._stream(int(body.get("n_predict") or 1), {**timings, "prompt_per_second": 200.0})
            return
        self._send({"content": Handler.content, "timings": timings})

    def _stream(self, n: int, timings: dict) -> None:
        """n_predict tokens as server-sent events, each with its top candidates, then the end
        with the timings (as llama-server streams a completion)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        probs = [{"token": " x", "logprob": -0.1, "top_logprobs": []}]
        for _ in range(n):
            event = {"content": " x", "stop": False, "completion_probabilities": probs}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        end = {"content": "", "stop": True, "timings": timings}
        self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())


def main(argv: list[str]) -> None:
    if "--help" in argv:  # (llama.cpp's programs print their usage and exit 0)
        print("usage: llama-server [options]")
        return
    port = int(argv[argv.index("--port") + 1])
    if "--spec-type" in argv and argv[argv.index("--spec-type") + 1] != "none":
        Handler.content = "drafted"
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
