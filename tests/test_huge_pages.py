"""Transparent huge pages for the worker: the environment it is spawned with, and what it got."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.commands.ask import load_settings
from chatapp.engine.local import huge_pages
from chatapp.engine.local.engine import LocalEngine
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
    with LocalEngine(replace(base, huge_pages=False)) as off:
        got_off = off.info.huge_pages
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
