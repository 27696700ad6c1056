"""What psutil reads on every system where /proc was read before: physical cores, whether a
process runs (zombies dead), a process's CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chatapp import cpus
from chatapp.history.schema import pid_alive
from chatapp.ui.bench.terminal_bench import _cpu_seconds


@pytest.fixture
def no_proc(monkeypatch):
    """/proc unreadable the way the old code read it (macOS and Windows have none)."""
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self).startswith("/proc"):
            raise FileNotFoundError(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)


def test_physical_cores_come_from_psutil(monkeypatch, no_proc):
    """The bug: without /proc/cpuinfo the cores were counted logical."""
    monkeypatch.setattr(cpus.psutil, "cpu_count", lambda logical=True: 16 if logical else 8)
    assert cpus.physical_cores() == 8
    monkeypatch.setattr(cpus.psutil, "cpu_count", lambda logical=True: 16 if logical else None)
    assert cpus.physical_cores() == 16  # psutil cannot say: the logical count


def test_the_physical_cores_here_are_psutil_s():
    assert cpus.physical_cores() == (psutil.cpu_count(logical=False) or psutil.cpu_count())


def test_a_running_process_is_alive_on_every_system(monkeypatch):
    """The bug: off POSIX pid_alive said False for every pid, so a second window marked the
    first one's reply as interrupted."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        monkeypatch.setattr(os, "name", "nt")
        assert pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)  # reaped: gone
    assert not pid_alive(None) and not pid_alive(0)
    assert pid_alive(os.getpid())


def test_a_zombie_is_dead_without_proc(no_proc):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Ended but not reaped (no wait() yet): a zombie, its pid still taken.
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child never ended"
            time.sleep(0.01)
        assert psutil.pid_exists(child.pid)
        assert not pid_alive(child.pid)
    finally:
        child.wait()


def test_cpu_seconds_of_a_process_from_psutil(no_proc):
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert _cpu_seconds(os.getpid()) >= 0.05
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert _cpu_seconds(child.pid) == 0.0  # gone
