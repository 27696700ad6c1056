"""The loads `bench --busy --load` runs beside the engine: programs that spin, build C, or stream
through memory, one per core taken; each started in its own process group and ended with it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chatapp.errors import ChatappError, UsageError

LOADS = ("spin", "build", "memory")
MEMORY_MIB = 512  # what one memory load streams through (two halves: copied, then summed)
SETTLE_S = 0.3  # after every load is running: the scheduler sees them

# Each load is a Python program: argv[1] is the bench's pid. It says "ready" once its work
# begins, and ends by itself when the bench is gone (its parent changed: the bench was killed
# without running its cleanup), so nothing is left behind even then.
_WATCH = "import os, sys\nparent = int(sys.argv[1])\nalive = lambda: os.getppid() == parent\n"
_READY = "print('ready', flush=True)\n"
SPIN = _WATCH + _READY + "while alive():\n    for _ in range(200_000):\n        pass\n"
BUILD = (
    _WATCH
    + "import subprocess\ncc, src, out = sys.argv[2:5]\n"
    + _READY
    + "while alive():\n"
    + "    subprocess.run([cc, '-O2', '-c', src, '-o', out], stdout=subprocess.DEVNULL,\n"
    + "                   stderr=subprocess.DEVNULL, check=False)\n"
)
MEMORY = (
    _WATCH
    + "import numpy as np\nhalf = int(sys.argv[2]) * 2**20 // 16\n"
    + "a = np.ones(half)\nb = np.empty_like(a)\n"
    + _READY
    + "while alive():\n    np.copyto(b, a)\n    a[0] = float(b.sum()) % 7.0\n"
)
PROGRAMS = {"spin": SPIN, "build": BUILD, "memory": MEMORY}


class LoadError(ChatappError):
    """A load program could not start (no memory for its buffer, a broken interpreter)."""


def compiler() -> str | None:
    """The C compiler a build load runs: $CC, else cc, gcc or clang on PATH."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def check_load(kind: str) -> None:
    """Refuse a load this machine cannot run, before any model loads."""
    if kind not in LOADS:
        raise UsageError(f"--load takes {', '.join(LOADS)} (got {kind!r})")
    if kind == "build" and compiler() is None:
        raise UsageError(
            "--load build compiles C, and no C compiler was found (cc, gcc, clang or $CC): "
            "install one, or use --load spin or --load memory"
        )


def c_source(functions: int = 120) -> str:
    """A C file that keeps the optimizer busy for a while: many small loops to inline,
    unroll and vectorize, as a real translation unit has."""
    parts = ["#include <stddef.h>\n"]
    for i in range(functions):
        parts.append(
            f"static double f{i}(const double *a, size_t n) {{\n"
            f"  double s = {i}.5;\n"
            f"  for (size_t k = 0; k < n; k++) {{\n"
            f"    s += a[k] * {i + 1}.25 / (1.0 + a[(k * {i + 3}) % n]);\n"
            f"    if (s > 1e9) s -= a[(k + {i}) % n];\n"
            f"  }}\n  return s;\n}}\n"
        )
    calls = " + ".join(f"f{i}(a, n)" for i in range(functions))
    parts.append(f"double total(const double *a, size_t n) {{ return {calls}; }}\n")
    return "".join(parts)


@dataclass
class Load:
    """Running load processes: what they are, and when the last of them began its work."""

    kind: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    started: float = 0.0  # perf_counter


def _args(kind: str, folder: Path, i: int, mib: int) -> list[str]:
    if kind == "build":
        src = folder / "load.c"
        if not src.exists():
            src.write_text(c_source(), encoding="utf-8")
        cc = compiler()
        if cc is None:
            check_load(kind)  # (raises: the compiler went away since the check)
        return [str(cc), str(src), str(folder / f"load-{i}.o")]
    if kind == "memory":
        return [str(mib)]
    return []


def memory_mib(n: int) -> int:
    """MEMORY_MIB per memory load, less where n of them would take over a quarter of the
    memory available now."""
    import psutil

    fits = psutil.virtual_memory().available // 2**20 // (4 * max(n, 1))
    return int(max(16, min(MEMORY_MIB, fits)))


@contextlib.contextmanager
def running(kind: str, n: int, mib: int | None = None) -> Iterator[Load]:
    """n processes of load `kind`, each keeping one core busy; all of them and their children
    (the compilers of a build) end when the block ends, however it ends (an exception, Ctrl-C).
    `mib`: a memory load's buffer (default memory_mib(n))."""
    check_load(kind)
    if mib is None:
        mib = memory_mib(n) if kind == "memory" else 0
    load = Load(kind)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-load-")))
        stack.callback(_stop, load.procs)
        for i in range(n):
            args = _args(kind, folder, i, mib)
            load.procs.append(
                _start([sys.executable, "-c", PROGRAMS[kind], str(os.getpid()), *args])
            )
        for proc in load.procs:
            _wait_ready(kind, proc)
        load.started = time.perf_counter()
        time.sleep(SETTLE_S if n else 0.0)
        yield load


def _start(cmd: list[str]) -> subprocess.Popen:
    """A load in a process group of its own (its children in it too), so one signal ends all;
    a terminal's Ctrl-C reaches only the bench, which ends them."""
    if os.name == "posix":
        group: dict = {"start_new_session": True}
    else:  # (Windows: no process groups to signal; _stop ends the tree through psutil)
        group = {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, **group
    )


def _wait_ready(kind: str, proc: subprocess.Popen) -> None:
    assert proc.stdout is not None and proc.stderr is not None
    if proc.stdout.readline().strip() == b"ready":
        return
    proc.wait()
    from chatapp.commands.bench.reference_tools import last_line

    raise LoadError(
        f"the {kind} load could not start (exit code {proc.returncode}); the last line it "
        f"printed: {last_line(proc.stderr.read())}"
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    """Kill each load's whole process group (or tree), then reap it."""
    for proc in procs:
        if os.name == "posix":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        else:
            _kill_tree(proc.pid)
    for proc in procs:
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        parent = psutil.Process(pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()
