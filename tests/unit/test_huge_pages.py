"""Transparent huge pages for the worker: the environment it is spawned with, and what it got."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.commands.ask_json import load_settings
from chatapp.engine.local.load import huge_pages
from chatapp.engine.local.process.child import real_std_streams
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions, ModelInfo
from chatapp.ui.widgets.stats import run_settings


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("always [madvise] never\n", True),
        ("[always] madvise never\n", True),
        ("always madvise [never]\n", False),
    ],
)
def test_available_reads_the_kernel_mode(tmp_path: Path, mode: str, expected: bool):
    f = tmp_path / "enabled"
    f.write_text(mode)
    assert huge_pages.available(f) is (expected and os.uname().sysname == "Linux")
    assert huge_pages.available(tmp_path / "missing") is False


def test_tunables_keep_what_was_set():
    assert huge_pages.tunables(None) == "glibc.malloc.hugetlb=1"
    assert huge_pages.tunables("glibc.malloc.arena_max=2") == (
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    )
    assert huge_pages.tunables("glibc.malloc.hugetlb=0") == "glibc.malloc.hugetlb=1"


def test_for_children_sets_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    monkeypatch.setattr(huge_pages, "available", lambda: True)
    with huge_pages.for_children(None):
        assert os.environ["GLIBC_TUNABLES"].endswith("glibc.malloc.hugetlb=1")
    assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2"
    with huge_pages.for_children(False):
        assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2"
    monkeypatch.delenv("GLIBC_TUNABLES")
    with huge_pages.for_children(True):
        assert "GLIBC_TUNABLES" in os.environ
    assert "GLIBC_TUNABLES" not in os.environ


def _thp_mode() -> str:
    try:
        return huge_pages.THP_ENABLED.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_the_worker_gets_huge_pages_only_when_asked(model_path):
    """A real worker: with huge pages (the default) its KV cache is on them where the kernel
    offers them on request; with huge_pages=False it is not (unless the kernel gives them to
    every process)."""
    base = LoadOptions(model_path=model_path, n_ctx=4096, n_gpu_layers=0)
    with LocalEngine(base) as on:
        got_on = on.info.huge_pages
        assert load_settings(on.info)["huge_pages"] is got_on
        # the weights are read into memory exactly where the pages are there for them
        assert on.info.weights_in_memory is got_on
        assert load_settings(on.info)["weights_in_memory"] is got_on
    with LocalEngine(replace(base, huge_pages=False)) as off:
        got_off = off.info.huge_pages
        assert off.info.weights_in_memory is False  # mapped from the file
    mode = _thp_mode()
    if "[madvise]" in mode:
        assert got_on is True
        assert got_off is False
    elif "[never]" in mode or not mode:
        assert got_on is False and got_off is False
    else:  # "always": the kernel decides for both
        pytest.skip('THP is "always" here: the option cannot change it')


def test_the_stats_panel_says_so():
    info = ModelInfo(
        path="m.gguf", n_vocab=10, n_ctx=64, n_ctx_train=64, load_s=0.1,
        gpu_offload_supported=False, n_gpu_layers=0, n_layers=2, n_threads=2,
        has_chat_template=True, repack=False,
    )  # fmt: skip
    assert run_settings(info) == "2 · fa off · repack off"
    assert run_settings(replace(info, huge_pages=True)) == "2 · fa off · repack off · THP"
    both = replace(info, huge_pages=True, weights_in_memory=True)
    assert run_settings(both) == "2 · fa off · repack off · THP weights"
    exact = replace(info, flash_attn=True, exact_batches=True)
    assert run_settings(exact) == "2 · fa on exact · repack off"


GIB = 1 << 30


def test_weights_are_read_in_only_with_huge_pages_on_the_cpu_and_room_to_spare(monkeypatch):
    monkeypatch.setattr(huge_pages, "available", lambda: True)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
    assert huge_pages.weights_in_memory(True, 4 * GIB, 16 * GIB)
    assert huge_pages.weights_in_memory(True, 8 * GIB, 16 * GIB)  # half what is available
    assert not huge_pages.weights_in_memory(True, 9 * GIB, 16 * GIB)  # more: mapped
    assert not huge_pages.weights_in_memory(False, GIB, 16 * GIB)  # GPU layers hold them
    assert not huge_pages.weights_in_memory(True, None, 16 * GIB)  # no such file
    assert not huge_pages.weights_in_memory(True, GIB, None)  # memory unknown
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")  # no huge pages asked
    assert not huge_pages.weights_in_memory(True, GIB, 16 * GIB)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    monkeypatch.setattr(huge_pages, "available", lambda: False)  # the kernel has none
    assert not huge_pages.weights_in_memory(True, GIB, 16 * GIB)


def test_llama_bench_runs_as_the_engine_when_asked(tmp_path: Path, monkeypatch):
    """The benchmark's "as engine" llama-bench: the engine's flash attention, its huge pages
    and its weights read into memory; the flag variants map the file as llama-bench does."""
    from chatapp.commands.bench.speed import llama_bench_run

    log = tmp_path / "calls"
    exe = tmp_path / "llama-bench"
    exe.write_text(
        f'#!/bin/sh\necho "$* | $GLIBC_TUNABLES" >> {log}\necho \'[{{"avg_ts": 50.0}}]\'\n'
    )
    exe.chmod(0o755)
    monkeypatch.setattr(huge_pages, "available", lambda: True)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    opts = LoadOptions(model_path="m.gguf", n_threads=2, flash_attn=True, huge_pages=True)
    run = llama_bench_run(exe, opts, 64, 32, "engine", in_memory=True)
    assert (run.prefill_tps, run.decode_tps) == (50.0, 50.0)
    calls = log.read_text().splitlines()
    assert len(calls) == 2  # pp, then tg at depth
    for call in calls:
        args, _, tunables = call.partition(" | ")
        assert "-fa 1" in args and "-lm none" in args and "-t 2" in args
        assert "glibc.malloc.hugetlb=1" in tunables
    log.unlink()
    llama_bench_run(exe, opts, 64, 32, "fa0", in_memory=True)
    for call in log.read_text().splitlines():
        args, _, tunables = call.partition(" | ")
        assert "-fa 0" in args and "-lm" not in args and "hugetlb" not in tunables


def _at_once(work, args) -> None:
    threads = [threading.Thread(target=work, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_workers_started_at_once_leave_the_environment_as_it_was(monkeypatch):
    """Two files loading together (`--vs`): each start sees its own setting, and afterwards no
    tunable is left on for the workers started later (huge_pages=False among them)."""
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(huge_pages, "available", lambda *a: True)
    seen = []

    def start(wanted: bool) -> None:
        with huge_pages.for_children(wanted):
            seen.append((wanted, os.environ.get("GLIBC_TUNABLES")))
            time.sleep(0.05)  # proc.start() takes this long or longer

    _at_once(start, [True, True, False, True])
    assert "GLIBC_TUNABLES" not in os.environ
    assert sorted(seen, key=str) == sorted(
        [(True, huge_pages.TUNABLE)] * 3 + [(False, None)], key=str
    )


def test_streams_swapped_for_a_start_at_once_are_put_back(monkeypatch):
    class NoFd:  # what a TUI or pytest may put in sys.stdout
        def fileno(self) -> int:
            raise OSError

    out, err = NoFd(), NoFd()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    def start(delay: float) -> None:  # the second starts while the first is inside, ends after
        time.sleep(delay)
        with real_std_streams():
            assert sys.stdout.fileno() >= 0
            time.sleep(0.05)

    _at_once(start, [0.0, 0.02])
    assert sys.stdout is out and sys.stderr is err
