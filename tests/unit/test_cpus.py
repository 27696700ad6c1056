"""The CPUs this process may use (affinity, cgroup quota), read once and used by every caller;
thread counts checked against them wherever they enter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, one_error_line, run_cli

from chatapp import cpu_load, cpus
from chatapp.config import load_config
from chatapp.engine.local.load import cpu_backend, tune_measurements
from chatapp.engine.protocol import LoadOptions


def _clear() -> None:
    for cached in (cpus.usable_cpus, cpus.usable_cores, cpus.allowed_cpus):
        cached.cache_clear()


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A machine of 8 logical CPUs and 4 cores whose affinity and cgroup quota a test sets."""

    def make(allowed: tuple[int, ...] | None, cpu_max: str | None = None) -> None:
        monkeypatch.setattr(cpus, "_affinity", lambda: allowed)
        monkeypatch.setattr(cpus.psutil, "cpu_count", lambda logical=True: 8 if logical else 4)
        cgroup = tmp_path / "cgroup"
        (cgroup / "app").mkdir(parents=True, exist_ok=True)
        if cpu_max is not None:
            (cgroup / "app" / "cpu.max").write_text(cpu_max + "\n")
        (tmp_path / "membership").write_text("0::/app\n")
        monkeypatch.setattr(cpus, "CGROUP_ROOT", cgroup)
        monkeypatch.setattr(cpus, "PROC_CGROUP", tmp_path / "membership")
        _clear()

    yield make
    _clear()


def _v2(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text + "\n")
    return tmp_path


def test_cgroup_v2_quota_is_the_tightest_along_the_hierarchy(tmp_path):
    root = _v2(
        tmp_path,
        {
            "user.slice/cpu.max": "300000 100000",
            "user.slice/app/cpu.max": "150000 100000",
            "user.slice/app/job/cpu.max": "max 100000",
        },
    )
    assert cpus.cgroup_quota(root, "0::/user.slice/app/job\n") == 1.5
    assert cpus.cgroup_quota(root, "0::/user.slice\n") == 3.0
    assert cpus.cgroup_quota(_v2(tmp_path / "none", {"cpu.max": "max 100000"}), "0::/\n") is None


def test_cgroup_v1_quota_and_a_container_seeing_only_its_own_folder(tmp_path):
    mount = tmp_path / "cpu,cpuacct"
    mount.mkdir()
    (mount / "cpu.cfs_quota_us").write_text("200000\n")
    (mount / "cpu.cfs_period_us").write_text("100000\n")
    # The path names the host's folder (no cgroup namespace); the mount is the container's own.
    membership = "5:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    assert cpus.cgroup_quota(tmp_path, membership) == 2.0
    (mount / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.cgroup_quota(tmp_path, membership) is None


def test_no_cgroup_files_no_quota(tmp_path):
    assert cpus.cgroup_quota(tmp_path, "0::/\n") is None
    assert cpus.cgroup_quota(tmp_path, "garbage\n::\n") is None


@pytest.mark.parametrize(
    ("allowed", "cpu_max", "usable"),
    [
        (None, None, 8),  # nothing known: the machine's
        ((0,), None, 1),  # taskset -c 0
        ((0, 1, 2, 3, 4, 5, 6, 7), "150000 100000", 2),  # docker --cpus 1.5: rounded up
        ((2, 3, 4), "400000 100000", 3),  # the fewer of the two
        ((0, 1), "20000 100000", 1),  # a fifth of a CPU: still one thread
    ],
)
def test_usable_cpus_are_the_fewest_of_machine_affinity_and_quota(
    machine, allowed, cpu_max, usable
):
    machine(allowed, cpu_max)
    assert cpus.usable_cpus() == usable
    assert cpus.usable_cores() == min(4, usable)


def test_affinity_from_the_os_else_psutil_else_unknown(monkeypatch):
    if hasattr(os, "sched_getaffinity"):
        assert cpus._affinity() == tuple(sorted(os.sched_getaffinity(0)))
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)

    class Windows:
        def cpu_affinity(self):
            return [5, 2]

    monkeypatch.setattr(cpus.psutil, "Process", Windows)
    assert cpus._affinity() == (2, 5)
    monkeypatch.setattr(cpus.psutil, "Process", object)  # macOS: no cpu_affinity
    assert cpus._affinity() is None


def test_every_caller_counts_the_usable_cpus(machine, monkeypatch):
    """The engine's default, the tune's counts, a tuned count, the load's share: one CPU."""
    machine((3,))
    assert LoadOptions("m.gguf").threads == 1
    assert tune_measurements.thread_counts() == [1]
    monkeypatch.setattr(cpu_backend.machine, "tuned", lambda path: {"threads": 8})
    monkeypatch.setattr(cpu_backend, "runs_as_tuned", lambda best, options: True)
    assert cpu_backend.choose(LoadOptions("m.gguf"))[0].n_threads == 1
    assert cpu_load.share_of_cpu(0.5) == 0.5  # of the one CPU it may run on
    assert cpu_load.disturbed(0.5, threads=1)  # half of its one CPU (of 8: 7 were free)
    machine(None)
    assert LoadOptions("m.gguf").threads == 8
    assert tune_measurements.thread_counts() == [8, 4, 3]


def test_others_load_is_read_on_the_allowed_cpus_only(machine, monkeypatch):
    from collections import namedtuple

    Times = namedtuple("Times", "user system idle")
    per_cpu = [Times(10.0, 0.0, 0.0), Times(0.0, 0.0, 10.0), Times(5.0, 5.0, 0.0)]
    monkeypatch.setattr(cpu_load.psutil, "cpu_times", lambda percpu=False: per_cpu)
    machine((1,))
    assert cpu_load._busy_seconds() == 0.0  # CPUs 0 and 2 were busy, not CPU 1
    machine((0, 2))
    assert cpu_load._busy_seconds() == 20.0


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is absent")
def test_under_taskset_one_cpu_the_default_is_one_thread():
    """The bug: `taskset -c 0` on a 2-CPU machine started 2 threads on its one CPU."""
    code = "from chatapp.engine.protocol import LoadOptions; print(LoadOptions('m.gguf').threads)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is absent")
def test_ask_under_taskset_runs_llama_cpp_on_one_thread():
    code = "import sys; from chatapp.cli import main; main(sys.argv[1:])"
    args = ["ask", "Hi", "--json", "--max-tokens", "2", "--ngl", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["settings"]["threads"] == 1


# ---- item 10: thread counts checked where they enter ---------------------------------------


def test_the_hard_limit_is_four_per_usable_cpu_at_most_256():
    assert cpus.thread_limit(2) == 8
    assert cpus.thread_limit(1) == 4
    assert cpus.thread_limit(64) == 256


def test_check_threads_warns_above_the_cpus_and_refuses_above_the_limit():
    assert cpus.check_threads(2, usable=2) == ""
    assert cpus.check_threads(3, usable=2) == (
        "3 is more than the 2 CPUs this process may use: the threads will wait on each other, "
        "and decode slower than 2 would"
    )
    with pytest.raises(cpus.ThreadCountError, match="^9 is more than 8, the most threads"):
        cpus.check_threads(9, usable=2)
    with pytest.raises(cpus.ThreadCountError, match="give 1 or more"):
        cpus.check_threads(0, usable=2)


def test_threads_999_is_refused_naming_the_flag():
    """The bug: --threads 999 was taken without a word and decoded at 0.2 t/s."""
    r = run_cli("ask", "hi", "--threads", "999")
    message = one_error_line(r, code=2)
    limit = cpus.thread_limit()
    assert message == (
        f"Invalid value for '--threads': 999 is more than {limit}, the most threads allowed "
        f"with the {cpus.usable_cpus()} CPU{'s' if cpus.usable_cpus() != 1 else ''} this "
        f"process may use (the fastest is usually {cpus.usable_cpus()} or fewer)"
    )


def test_threads_above_the_cpus_is_taken_with_one_warning_line(fresh_dirs, tmp_path):
    over = cpus.usable_cpus() + 1
    r = run_cli("ask", "hi", "--threads", str(over), "--model", str(tmp_path / "none.gguf"))
    warning, *rest = r.stderr.splitlines()
    assert warning == f"warning: --threads {cpus.check_threads(over)}"
    assert r.returncode == 1 and len(rest) == 1  # the flag was taken: the missing file is next


def test_the_tui_gets_the_flag_s_warning_as_a_startup_note():
    from chatapp.cli.options import threads_notes

    over = cpus.usable_cpus() + 1
    assert threads_notes(over) == [f"--threads {cpus.check_threads(over)}"]
    assert threads_notes(None) == [] and threads_notes(1) == []


def test_config_threads_are_checked_as_the_flag_is(tmp_path):
    path = tmp_path / "config.toml"
    limit, usable = cpus.thread_limit(), cpus.usable_cpus()
    path.write_text(f"threads = {limit + 1}\n")
    config, problems = load_config(path)
    assert config.threads is None  # refused: the default
    with pytest.raises(cpus.ThreadCountError) as refused:
        cpus.check_threads(limit + 1)
    assert problems == [f"config.toml: threads {refused.value}"]
    path.write_text(f"threads = {usable + 1}\n")
    config, problems = load_config(path)
    assert config.threads == usable + 1  # kept, with a warning
    assert problems == [f"config.toml: threads {cpus.check_threads(usable + 1)}"]
    for value in ("0", "-1", '"4"'):
        path.write_text(f"threads = {value}\n")
        config, problems = load_config(path)
        assert config.threads is None
        assert len(problems) == (0 if value == "0" else 1)
