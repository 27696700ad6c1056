"""Transparent huge pages for the worker's big buffers (KV cache, compute), via glibc's malloc."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

# glibc >= 2.35: malloc madvises its large mmap'd chunks MADV_HUGEPAGE. Older glibc ignores an
# unknown tunable; other C libraries ignore the variable.
TUNABLE = "glibc.malloc.hugetlb=1"
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# The environment is the process's: two workers started at once (the two files of `--vs`)
# would each restore what the other set, leaving the tunable on for every later worker.
_ENVIRONMENT = threading.Lock()


def available(thp_enabled: Path = THP_ENABLED) -> bool:
    """Linux with transparent huge pages not switched off ("always" or "madvise")."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mode = thp_enabled.read_text()
    except OSError:
        return False
    return "[never]" not in mode


def tunables(current: str | None) -> str:
    """GLIBC_TUNABLES with huge pages added to what was already set (colon-separated)."""
    kept = [t for t in (current or "").split(":") if t and not t.startswith("glibc.malloc.hugetlb")]
    return ":".join([*kept, TUNABLE])


@contextlib.contextmanager
def for_children(wanted: bool | None):
    """Processes started inside this block (spawned: the tunable is read at exec) get huge
    pages for their large allocations, unless `wanted` is False or the system has none.

    With 4 KB pages the transposed V cache that decode reads at depth spans thousands of pages
    per token; measured on a 2-core Xeon at depth 1024 (n_ctx 4096), a bare decode loop ran
    0.960x llama-bench with 4 KB pages and 0.979x with huge pages."""
    with _ENVIRONMENT:  # (a worker started without them waits too: it reads the same env)
        if wanted is False or not available():
            yield
            return
        saved = os.environ.get("GLIBC_TUNABLES")
        os.environ["GLIBC_TUNABLES"] = tunables(saved)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("GLIBC_TUNABLES", None)
            else:
                os.environ["GLIBC_TUNABLES"] = saved


def in_use() -> bool:
    """Whether this process has anonymous huge pages now (read in the worker after loading)."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) > 0
    except (OSError, ValueError, IndexError):
        pass
    return False


def this_process_has_them() -> bool:
    """Whether this process's large allocations get huge pages (it was started inside
    for_children, and the system has them)."""
    return TUNABLE in os.environ.get("GLIBC_TUNABLES", "").split(":") and available()


def weights_in_memory(cpu_holds_weights: bool, size: int | None, ram: int | None) -> bool:
    """Whether llama.cpp should read the model's weights into memory instead of mapping the
    file: where this process has huge pages, the CPU holds the weights (no GPU layers), and
    the file takes at most half the memory available (a copy cannot be dropped under memory
    pressure as mapped file pages can).

    Mapped, the weights sit in 4 KB page-cache pages. Every decode step reads all of them:
    the bundled 92 MB model spans ~24,000 pages, far past what the TLB covers. Read into
    memory, they take 2 MB pages. Measured in one process, on the 2-core EPYC, with the
    bundled model, at depth 1024 (12 alternating rounds of 128 tokens), a bare decode loop
    ran **1.049x** (median) with the weights read in. With huge pages off it ran 1.001x, so
    the pages are what counts."""
    if not (cpu_holds_weights and this_process_has_them()) or size is None or ram is None:
        return False
    return size <= ram // 2
