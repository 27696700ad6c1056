"""llama.cpp's llama-bench as a contender of the benches: one pp and one tg run, as JSON."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from chatapp.commands.bench.reference_tools import last_line, printed_garbage, run_tool
from chatapp.commands.bench.run import Run
from chatapp.engine.local.load import huge_pages
from chatapp.engine.protocol import LoadOptions

NAME = "llama-bench"

LLAMA_BENCH_VARIANTS = {
    "llama-bench fa0": "fa0",
    "llama-bench fa1": "fa1",
    "llama-bench as engine": "engine",
    "llama.cpp default": "default",
}


class _Crashed(Exception):
    """llama-bench was killed by a signal (its own configuration's crash)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        try:
            self.signal = signal.Signals(-code).name
        except ValueError:
            self.signal = f"signal {-code}"


def llama_bench_run(
    exe: Path,
    options: LoadOptions,
    n_prompt: int,
    n_gen: int,
    variant: str = "fa0",
    in_memory: bool = False,
) -> Run:
    """pp at depth 0, and tg after n_prompt tokens (-d), as the engine's runs are.

    variant "fa0" / "fa1": flash attention off / on with the engine's threads and repack;
    "engine": as the engine runs, with its flash attention, its transparent huge pages
    (engine/local/load/huge_pages.py: not a llama-bench flag, set for the process as the engine
    sets them) and, `in_memory`, the weights read into memory (-lm none) as the engine read
    them; "default": llama-bench's own defaults (flash attention auto, its thread count,
    repack on), i.e. what llama.cpp does when nobody chooses. A llama-bench that exits with an
    error or prints no result is a ToolError naming its last line."""
    ngl = str(options.n_gpu_layers if options.n_gpu_layers >= 0 else 99)
    common = [
        str(exe), "-m", options.model_path, "-ngl", ngl,
        "-b", str(options.n_batch), "-ub", str(options.n_batch), "-r", "1", "-o", "json",
    ]  # fmt: skip
    pages = variant == "engine" and bool(options.huge_pages)
    if variant == "engine":
        variant = "fa1" if options.flash_attn else "fa0"
        if in_memory:
            common += ["-lm", "none"]
    if variant != "default":
        common += ["-t", str(options.threads), "-fa", variant[-1]]
        common += ["--repack", "0" if options.repack is False else "1"]

    def avg_ts(*args: str) -> float:
        with huge_pages.for_children(pages):
            done = run_tool(NAME, [*common, *args], timeout=600)
        if done.returncode < 0:
            raise _Crashed(done.returncode)
        return _avg_ts(done.stdout, done.stderr)

    try:
        pp = avg_ts("-p", str(n_prompt), "-n", "0")
        tg = avg_ts("-p", "0", "-n", str(n_gen), "-d", str(n_prompt))
    except _Crashed as crash:
        # llama.cpp's own configuration can crash where chatapp's fallback does not (its AMX
        # path on some CPUs): a result of the benchmark, not a failure of it.
        return Run(0.0, 0.0, n_gen, crashed=crash.signal)
    return Run(pp, tg, n_gen)


def _avg_ts(stdout: str, stderr: str) -> float:
    """The first result's avg_ts of llama-bench's `-o json` output."""
    try:
        rows = json.loads(stdout[stdout.index("[") :])
        value = float(rows[0]["avg_ts"])
    except (ValueError, LookupError, TypeError) as exc:  # (JSONDecodeError is a ValueError)
        raise printed_garbage(NAME, last_line(stdout, stderr), "JSON result") from exc
    return value
