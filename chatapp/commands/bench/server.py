"""llama-server as a contender of `chatapp bench`: the peer doing the same work as the token
loop (a streamed reply with the top-10 log-probabilities of every token), on its defaults."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from chatapp.commands.bench.reference_tools import ToolError, log_last_line
from chatapp.commands.bench.run import Run
from chatapp.engine.protocol import LoadOptions
from chatapp.sampling import SamplerSettings, server_fields

TOP_N = 10  # candidates per token, as the engine reports them
NAME = "llama-server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`llama-server -m MODEL -c N_CTX` on 127.0.0.1 (its other settings its own defaults,
    the GPU layers as the engine's), stopped on exit."""

    def __init__(
        self, exe: Path, options: LoadOptions, log_path: str, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = _free_port()
        ngl = options.n_gpu_layers if options.n_gpu_layers >= 0 else 99
        self.cmd = [
            str(exe), "-m", options.model_path, "-c", str(options.n_ctx), "-ngl", str(ngl),
            "--host", "127.0.0.1", "--port", str(self.port), "-np", "1", *extra,
        ]  # fmt: skip
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LlamaServer:
        log = open(self.log_path, "wb")  # noqa: SIM115 (the server writes it until it stops)
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:  # (not executable, a bad interpreter line, ...)
            log.close()
            raise ToolError(f"{NAME} could not be started ({exc.strerror or exc})") from exc
        try:
            self._wait_healthy()
        except BaseException:  # (Ctrl-C too: __exit__ does not run when __enter__ raises)
            self.__exit__()
            raise
        return self

    def _wait_healthy(self) -> None:
        import httpx

        assert self.proc is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = log_last_line(self.log_path)
                raise ToolError(
                    f"{NAME} exited with code {self.proc.returncode} before it answered; "
                    f"the last line it printed: {said} (all of it: {self.log_path})"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ToolError(
            f"{NAME} did not answer /health within 300 s; the last line it printed: "
            f"{log_last_line(self.log_path)}"
        )

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def run(self, prompt: tuple[int, ...], n: int, settings: SamplerSettings):
        """One streamed completion of exactly n tokens after `prompt` (token ids, no cache
        reuse), with the top-10 probabilities of every token; llama-server's own timings."""
        import httpx

        body = {
            "prompt": list(prompt), "n_predict": n, "stream": True, "n_probs": TOP_N,
            "ignore_eos": True, "cache_prompt": False,
            **server_fields(settings, NAME, leave_out=("max_tokens",)),  # (n_predict says it)
        }  # fmt: skip
        try:
            timings, tokens = self._stream(body)
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise ToolError(
                f"{NAME}'s /completion failed ({type(exc).__name__}: {exc}); the last line it "
                f"printed: {log_last_line(self.log_path)}"
            ) from exc
        if not isinstance(timings, dict) or not timings.get("predicted_per_second"):
            raise ToolError(
                f"{NAME} sent no timings with its reply; the last line it printed: "
                f"{log_last_line(self.log_path)}"
            )
        return Run(timings.get("prompt_per_second") or 0.0, timings["predicted_per_second"], tokens)

    def _stream(self, body: dict) -> tuple[object, int]:
        """The streamed completion's timings (its last event's) and its tokens."""
        import httpx

        timings = None
        tokens = 0
        with httpx.stream("POST", f"{self.url}/completion", json=body, timeout=600) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = json.loads(line[6:])
                tokens += len(data.get("completion_probabilities") or []) or bool(
                    data.get("content")
                )
                if data.get("stop"):
                    timings = data.get("timings")
        return timings, tokens
