"""This machine's two speed ceilings, measured: memory read bandwidth and arithmetic peak."""

from __future__ import annotations

import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import numpy as np
import psutil

MIB = 1024 * 1024
READ_BUFFER_MIB = 512  # far past any last-level cache (a few to a few hundred MiB)
MATRIX_SIDE = 1024  # 2 GFLOP a product: long enough to time, short enough for a laptop
COMPUTE_METHOD = "f32 matrix multiply through numpy's BLAS"
READ_METHOD = "sum of a {mib} MiB array, {threads} threads"


@dataclass(frozen=True)
class Ceilings:
    """What the machine can do at most, measured here: decode is bounded by the first (every
    weight read once per token), prefill by the second (many tokens per weight read)."""

    mem_read_gbps: float
    compute_gflops: float
    threads: int
    read_method: str
    compute_method: str
    measured_at: str  # ISO date and time, UTC
    seconds: float  # how long measuring took

    def to_dict(self) -> dict:
        return asdict(self)


def read_bandwidth(threads: int, mib: int = READ_BUFFER_MIB, rounds: int = 3) -> float:
    """GB/s read by `threads` threads summing their share of one large array (numpy lets the
    GIL go in a reduction); the best of `rounds`, the first touch of the pages not timed."""
    words = mib * MIB // 8
    data = np.ones(words, dtype=np.int64)  # written once: every page is real memory
    parts = np.array_split(data, max(1, threads))
    best = 0.0
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for _ in range(rounds):
            start = time.perf_counter()
            list(pool.map(np.sum, parts))
            seconds = time.perf_counter() - start
            best = max(best, data.nbytes / seconds / 1e9)
    return best


def compute_peak(side: int = MATRIX_SIDE, rounds: int = 3) -> float:
    """GFLOP/s of an f32 matrix product through numpy's BLAS (its own threads): the best of
    `rounds`, after one untimed product."""
    rng = np.random.default_rng(0)
    a = rng.random((side, side), dtype=np.float32)
    b = rng.random((side, side), dtype=np.float32)
    a @ b
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        a @ b
        best = max(best, 2 * side**3 / (time.perf_counter() - start) / 1e9)
    return best


def buffer_mib(available: int | None) -> int:
    """The read buffer: READ_BUFFER_MIB, or an eighth of the free memory where that is less
    (at least 64 MiB)."""
    if available is None:
        return READ_BUFFER_MIB
    return max(64, min(READ_BUFFER_MIB, available // 8 // MIB))


def measure(threads: int) -> Ceilings:
    """Both ceilings, with the engine's thread count for the read (under 3 s here)."""
    steps = measure_in_steps(threads)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            found: Ceilings = done.value
            return found


def measure_in_steps(threads: int) -> Generator[None, None, Ceilings]:
    """measure(), as two steps with a pause between (the first-use tune runs it in the
    worker's idle time, a step at a time, so a message waits for at most one step)."""
    start = time.perf_counter()
    try:
        available: int | None = int(psutil.virtual_memory().available)
    except (psutil.Error, OSError, RuntimeError):
        available = None
    mib = buffer_mib(available)
    gbps = read_bandwidth(threads, mib)
    yield
    gflops = compute_peak()
    return Ceilings(
        mem_read_gbps=round(gbps, 2),
        compute_gflops=round(gflops, 1),
        threads=threads,
        read_method=READ_METHOD.format(mib=mib, threads=threads),
        compute_method=COMPUTE_METHOD,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - start, 2),
    )


def best_of(saved: dict | None, new: Ceilings) -> dict:
    """A new measurement kept with what was saved: each ceiling the higher of the two (a
    ceiling is the most the machine did; one measured beside other work reads low), with the
    method and date of the measurement it came from."""
    fresh = new.to_dict()
    if not saved:
        return fresh
    kept = dict(saved)
    try:
        if fresh["mem_read_gbps"] >= float(saved["mem_read_gbps"]):
            kept.update({k: fresh[k] for k in ("mem_read_gbps", "threads", "read_method")})
        if fresh["compute_gflops"] >= float(saved["compute_gflops"]):
            kept.update({k: fresh[k] for k in ("compute_gflops", "compute_method")})
    except (KeyError, TypeError, ValueError):
        return fresh  # a saved entry of another shape: the new one replaces it
    kept.update(measured_at=fresh["measured_at"], seconds=fresh["seconds"])
    return kept
