"""`bench --busy --load`: each load runs its programs while the block runs, and ends all of them
(the compilers a build started too) however the block ends: normally, an exception, Ctrl-C, or
the bench killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from chatapp.commands.bench import loads as bench_loads
from chatapp.commands.bench.loads import LOADS, running
from chatapp.errors import UsageError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups")


def _gone(pids: list[int], timeout: float = 30.0) -> bool:
    """Whether every pid has ended (zombies count as ended), waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _family(procs) -> list[int]:
    """The load programs and every child they have now (a build's compilers)."""
    pids = []
    for proc in procs:
        pids.append(proc.pid)
        try:
            pids += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return pids


def _wait_for_compiler(procs, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_family(procs)) > len(procs):
            return
        time.sleep(0.05)
    raise AssertionError("the build load started no compiler")


@pytest.mark.parametrize("kind", LOADS)
def test_each_load_works_while_it_runs_and_leaves_nothing_after_an_exception(kind):
    if kind == "build" and bench_loads.compiler() is None:
        pytest.skip("no C compiler here")
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="the bench failed"), running(kind, 2, mib=16) as load:
        assert load.kind == kind and len(load.procs) == 2 and load.started > 0
        for proc in load.procs:
            assert proc.poll() is None  # working
            # each in a group of its own: one signal reaches what it starts
            assert os.getpgid(proc.pid) == proc.pid
        if kind == "build":
            _wait_for_compiler(load.procs)  # (the program waits on its compilers, which work)
        else:
            assert psutil.Process(load.procs[0].pid).cpu_percent(0.3) > 0  # working, not waiting
        pids = _family(load.procs)
        raise RuntimeError("the bench failed")
    assert _gone(pids)


def test_no_load_for_no_cores_and_the_generated_source_compiles(tmp_path):
    with running("spin", 0) as load:
        assert load.procs == []
    cc = bench_loads.compiler()
    if cc is None:
        pytest.skip("no C compiler here")
    src = tmp_path / "load.c"
    src.write_text(bench_loads.c_source(8))
    done = subprocess.run([cc, "-O2", "-c", str(src), "-o", str(tmp_path / "load.o")])
    assert done.returncode == 0


def test_build_without_a_compiler_is_refused_in_a_sentence(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(UsageError, match="no C compiler was found .* --load spin or --load memory"):
        bench_loads.check_load("build")
    with pytest.raises(UsageError), running("build", 1):
        pass


BENCH = textwrap.dedent(
    """
    import sys, time
    from chatapp.commands.bench.loads import running
    with running(sys.argv[1], 2, mib=16) as load:
        time.sleep(1.0)  # (a build's first compilers start)
        print(" ".join(str(p.pid) for p in load.procs), flush=True)
        time.sleep(600)
    """
)


def _bench(kind: str) -> tuple[subprocess.Popen, list[int]]:
    """A bench in a process of its own, holding `kind` with 2 programs: it and their pids."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", BENCH, kind], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip(), "the bench did not start its load"
    pids = [int(p) for p in line.split()]
    family = [*pids]
    for pid in pids:
        try:
            family += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return proc, family


@pytest.mark.parametrize("kind", ["spin", "build"])
def test_ctrl_c_ends_the_load(kind):
    """Ctrl-C (SIGINT to the bench) ends every program of the load, the compilers too."""
    if kind == "build" and bench_loads.compiler() is None:
        pytest.skip("no C compiler here")
    proc, family = _bench(kind)
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert _gone(family)


@pytest.mark.parametrize("kind", ["spin", "memory"])
def test_a_load_ends_by_itself_when_the_bench_is_killed(kind):
    """SIGKILL leaves the bench no time to clean up: each program sees its parent gone."""
    proc, family = _bench(kind)
    proc.kill()
    proc.wait(60)
    assert _gone(family)
