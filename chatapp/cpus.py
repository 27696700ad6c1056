"""The CPUs this process may use (affinity, cgroup quota); thread counts checked against them."""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path

import psutil

from chatapp.errors import UsageError

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Which cgroup this process is in: psutil has no API for it (Linux only; absent elsewhere).
PROC_CGROUP = Path("/proc/self/cgroup")
MOST_THREADS = 256
"""The hard limit on a thread count, whatever the machine (see thread_limit)."""
OVER_CPUS = 4
"""... and at most this many threads per usable CPU (see thread_limit)."""


class ThreadCountError(UsageError):
    """A thread count no machine here could run; str() says what is allowed."""


def machine_cpus() -> int:
    """The machine's logical CPUs, whichever this process may use."""
    return psutil.cpu_count() or os.cpu_count() or 1


def _affinity() -> tuple[int, ...] | None:
    """The CPUs the scheduler may run this process on, by number (taskset, cpusets, a job
    object), read now; None where the system cannot say (macOS)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))  # Linux, the BSDs
    except (AttributeError, OSError):
        pass
    try:
        return tuple(sorted(psutil.Process().cpu_affinity() or ()))  # Windows
    except (AttributeError, psutil.Error, OSError):
        return None


@cache
def allowed_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on, by number, read once; all of them where the system
    cannot say. Other programs' load is read on these (cpu_load)."""
    return _affinity() or tuple(range(machine_cpus()))


def _cgroup_dirs(root: Path, membership: str) -> list[tuple[Path, str]]:
    """The cgroup folders that may limit this process's CPU time, each with its kind ("v2":
    cpu.max, "v1": cpu.cfs_quota_us): its own and every ancestor's (a quota set on a parent
    limits its children too), under each place the cpu controller may be mounted."""
    found: list[tuple[Path, str]] = []
    for line in membership.splitlines():
        hier, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if hier == "0" and controllers == "":
            bases, kind = [root, root / "unified"], "v2"
        elif "cpu" in controllers.split(","):
            bases, kind = [root / controllers, root / "cpu"], "v1"
        else:
            continue
        parts = [p for p in rel.strip().split("/") if p]
        for base in bases:
            # Inside a container without its own cgroup namespace the path names the host's
            # folder, absent here: its ancestors up to the mount are looked at all the same.
            found += [(base.joinpath(*parts[:n]), kind) for n in range(len(parts), -1, -1)]
    return found


def _limit(folder: Path, kind: str) -> float | None:
    """The CPUs one cgroup folder allows (quota / period), None when it sets no limit."""
    try:
        if kind == "v2":
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
        return None if int(quota) < 0 else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def cgroup_quota(root: Path | None = None, membership: str | None = None) -> float | None:
    """The CPUs' worth of time this process's cgroups allow (Linux containers and systemd
    units set it: `docker --cpus 2`, CPUQuota=), the tightest along the hierarchy; None when
    none is set or this is not Linux. `root`: where cgroups are mounted (CGROUP_ROOT if None);
    `membership`: /proc/self/cgroup's text (PROC_CGROUP read if None)."""
    if membership is None:
        try:
            membership = PROC_CGROUP.read_text()
        except OSError:
            return None
    folders = _cgroup_dirs(root or CGROUP_ROOT, membership)
    limits = [q for q in (_limit(d, k) for d, k in folders) if q]
    return min(limits) if limits else None


def count_usable(root: Path | None = None, membership: str | None = None) -> int:
    """The CPUs this process can keep busy at once: the fewest of the machine's logical CPUs,
    those its affinity allows and its cgroup quota (rounded up, as the JVM counts a quota: a
    part of a CPU is still one more to run on), at least 1. Read anew; usable_cpus() caches."""
    counts = [machine_cpus()]
    allowed = _affinity()
    if allowed:
        counts.append(len(allowed))
    quota = cgroup_quota(root, membership)
    if quota:
        counts.append(math.ceil(quota))
    return max(1, min(counts))


@cache
def usable_cpus() -> int:
    """The CPUs this process may use, read once (count_usable): what every thread count and
    every share of "the machine" here is measured against."""
    return count_usable()


def physical_cores() -> int:
    """The machine's physical cores (psutil; the logical CPUs where it cannot say)."""
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


@cache
def usable_cores() -> int:
    """Physical cores this process may use: the machine's, at most its usable CPUs (a process
    allowed 2 CPUs of a 16-core machine has 2 to fill)."""
    return min(physical_cores(), usable_cpus())


def thread_limit(usable: int | None = None) -> int:
    """The most threads a count may ask for: four per usable CPU, at most 256. Past the CPUs
    each extra llama.cpp thread only waits (every decode step meets all of them at barriers,
    and a thread the scheduler parked holds the others up): issue 49 measured 2 threads on one
    CPU at 55 t/s against 71-81 with 1, and --threads 999 on 2 CPUs at 0.2 t/s. Up to 4x is
    left for measuring that; past it a count is a slip. 256 bounds it on the largest machines
    (ggml's own GGML_MAX_N_THREADS is 512)."""
    return min(OVER_CPUS * (usable or usable_cpus()), MOST_THREADS)


def check_threads(count: int, usable: int | None = None) -> str:
    """The one check of a thread count, wherever it enters (--threads, config.toml's
    `threads`): raises ThreadCountError below 1 or above thread_limit; returns a warning when
    it is more than the usable CPUs, "" when it is not. Each reads after the flag or key."""
    usable = usable or usable_cpus()
    cpus = f"{usable} CPU" + ("s" if usable != 1 else "")
    if count < 1:
        raise ThreadCountError(f"{count} is not a thread count; give 1 or more")
    if count > thread_limit(usable):
        raise ThreadCountError(
            f"{count} is more than {thread_limit(usable)}, the most threads allowed with the "
            f"{cpus} this process may use (the fastest is usually {usable} or fewer)"
        )
    if count > usable:
        return (
            f"{count} is more than the {cpus} this process may use: the threads will wait on "
            f"each other, and decode slower than {usable} would"
        )
    return ""
