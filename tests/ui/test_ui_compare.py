"""Pilot tests of the compare screen (F10): a text to score, live progress, bars, the best
trade-off under a KLD budget, past runs reopened; on a fake engine, then on the real model
(over the chat: the lesson's fit step quotes that run)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import SIZE, Host, bundled, text_of, wait_until
from textual.widgets import Input, OptionList, SelectionList

from chatapp.chat import lesson
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    EngineError,
    Finished,
    LoadOptions,
    ModelInfo,
    StopReason,
    Token,
)
from chatapp.metrics import GenerationStats
from chatapp.models import compare, compare_runs, quantize
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.compare_runs import runs_folder, saved_runs
from chatapp.models.fit import gib
from chatapp.stats_text import decode_text
from chatapp.ui.app import ChatApp
from chatapp.ui.screens import compare as compare_screen
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.compare_history import PastRunsScreen
from chatapp.ui.widgets.compare_setup import CompareSetup
from chatapp.ui.widgets.compare_view import CompareTable
from chatapp.ui.widgets.lesson_strip import LessonStrip

pytestmark = pytest.mark.usefixtures("fresh_dirs")
APACHE = Path(__file__).parents[1] / "data" / "apache-2.0.txt"


class TextEngine:
    """Stands in for LocalEngine on `compare --text`: a fixed reply; `perplexity` reports half
    the text, waits for `gate`, reports the rest; the KLD is large for a Q2_K file."""

    gate: threading.Event | None = None

    def __init__(self, opts) -> None:
        self.path = opts.model_path
        self.pid = os.getpid()

    def start(self):
        return ModelInfo(self.path, 16, 1024, 2048, 0.01, False, 0, 1, 1, True)

    def generate(self, request):
        n = request.settings.max_tokens
        for i in range(n):
            yield Token(i, 1, b"a", "a", float(i))
        stats = GenerationStats(10, 10, n, 0.1, 0.05, 0.2, 10 + n, 1024)
        yield Finished(StopReason.MAX_TOKENS, "a" * n, stats)

    def perplexity(self, job, progress=None):
        if len(job.text) < 2 * job.n_ctx:
            raise EngineError(
                f"the text is {len(job.text)} tokens; chunks of {job.n_ctx} need more"
            )
        progress(5, 10, 0.5)
        if self.gate is not None:
            assert self.gate.wait(10)
        progress(10, 10, 1.0)
        nll = np.full(10, 2.0)
        arrays = {"nll": nll, "n_chunks": 2}
        if not job.write_base:
            kld = 0.6 if "Q2_K" in self.path else 0.01
            arrays |= dict(kld=np.full(10, kld), nll_base=nll, p_diff=np.zeros(10),
                           same_top=np.ones(10, bool))  # fmt: skip
        return arrays

    def close(self) -> None:
        pass


def links(tmp_path: Path, *quants: str) -> list[str]:
    out = []
    for q in quants:
        (tmp_path / f"model.{q}.gguf").symlink_to(bundled())
        out.append(str(tmp_path / f"model.{q}.gguf"))
    return out


def fake_screen(files: list[str]) -> CompareScreen:
    return CompareScreen(files=files, n_threads=1, tokens=4, make_engine=TextEngine)


class QuietMachine:
    """No other program's CPU time: a run here is never marked disturbed, whatever else this
    machine is doing (the disturbed mark has its own test in test_quantize_compare.py)."""

    def __call__(self) -> float:
        return 0.0


async def test_a_run_on_a_text_shows_progress_bars_the_tradeoff_and_is_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "OtherPrograms", QuietMachine)
    files = links(tmp_path, "Q8_0", "Q4_1", "Q2_K")
    text = tmp_path / "text.txt"
    text.write_text("word " * 400)
    gate = TextEngine.gate = threading.Event()
    screen = fake_screen(files)
    try:
        async with Host(screen).run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(screen.query_one(SelectionList).selected) == 3)
            screen.query_one("#cmp-text", Input).value = str(text)
            screen.query_one("#cmp-ctx", Input).value = "64"
            await pilot.press("ctrl+r")
            table = screen.query_one(CompareTable)
            ref = files[0]  # the files are the same size: the first is the reference

            def scoring() -> bool:
                status = str(table.get_cell(ref, "status")) if ref in table.rows else ""
                return status.startswith("5/10")

            await wait_until(pilot, scoring)
            assert table.get_cell(ref, "status") == "5/10 tokens, 10 t/s, 0 s left"
            await wait_until(
                pilot, lambda: "5/10 tokens" in text_of(screen.query_one("#cmp-status"))
            )
            assert "scoring model.Q8_0.gguf" in text_of(screen.query_one("#cmp-status"))
            gate.set()
            await wait_until(pilot, lambda: screen.busy == "")
            result = screen.result
            assert result is not None, text_of(screen.query_one("#cmp-status"))
            assert result.text_file == str(text) and result.text_ctx == 64
            runs = {r.name: r for r in result.runs}  # all three are the bundled Q4_1 inside
            assert runs["model.Q4_1.gguf"].mean_kl == pytest.approx(0.01)
            assert runs["model.Q2_K.gguf"].scored_tokens == 10
            assert "same top %" in [str(c.label) for c in table.columns.values()]
            bars = text_of(screen.query_one("#cmp-bars"))
            for title in ("size", "peak RSS", "decode speed", "mean KLD vs the reference"):
                assert title in bars
            assert "perplexity" in bars and "0.6000" in bars
            best = text_of(screen.query_one("#cmp-best"))
            assert best.startswith("★ best trade-off: model.Q8_0.gguf")  # equal sizes: KLD 0 wins
            assert str(table.get_cell(ref, "status")) == "★ best, reference"
            assert "saved to" in text_of(screen.query_one("#cmp-status"))
            screen.query_one("#cmp-budget", Input).value = "abc"
            await pilot.pause()
            assert "KLD budget must be a number" in text_of(screen.query_one("#cmp-status"))
    finally:
        TextEngine.gate = None
    saved, notes = saved_runs()
    assert notes == [] and [s.result for s in saved] == [result]


async def test_bad_text_path_and_too_short_text_are_one_sentence(tmp_path):
    files = links(tmp_path, "Q8_0", "Q4_1")
    screen = fake_screen(files)
    async with Host(screen).run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(screen.query_one(SelectionList).selected) == 2)
        screen.query_one("#cmp-text", Input).value = str(tmp_path / "missing.txt")
        await pilot.press("ctrl+r")
        status = screen.query_one("#cmp-status")
        assert text_of(status) == f"no text file at {tmp_path / 'missing.txt'}"
        assert screen.busy == "" and status.has_class("error")
        short = tmp_path / "short.txt"
        short.write_text("too short")
        screen.query_one("#cmp-text", Input).value = str(short)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: screen.busy == "")
        assert text_of(status).startswith("compare failed: the text is 9 tokens")
        assert str(screen.query_one(CompareTable).get_cell(files[0], "status")) == "not run"
        assert screen.app.screen is screen


def fixed_result() -> CompareResult:
    mib = 2**20

    def run(q: str, size: float, kl: float, tps: float, ppl: float, **kw) -> RunResult:
        return RunResult(f"/models/SmolLM2.{q}.gguf", f"SmolLM2.{q}.gguf", q, int(size * mib),
                         load_s=0.2, peak_rss_bytes=int((size + 60) * mib), ttft_s=0.05,
                         prefill_tps=900.0, decode_tps=tps, prompt_tokens=20,
                         completion_tokens=8, text=f"The sky is blue ({q}).", mean_kl=kl,
                         perplexity=ppl, top1_agreement=1 - kl, scored_tokens=1071,
                         **kw)  # fmt: skip

    runs = (
        run("Q8_0", 138.1, 0.0, 40.2, 16.598, is_reference=True),
        run("Q4_1", 94.7, 0.009525, 52.5, 16.610),
        run("Q2_K", 84.0, 0.607221, 58.1, 25.571),
    )
    return CompareResult("2026-12-04T16:00:00+00:00", "Why is the sky blue?", 8, 1234, 1024, 1,
                         0, runs[0].path, runs, wall_s=9.5, text_file="/texts/apache-2.0.txt",
                         text_ctx=128)  # fmt: skip


async def test_past_runs_reopen_a_saved_run_and_skip_a_corrupt_file(tmp_path):
    folder = runs_folder()
    folder.mkdir(parents=True)
    (folder / "compare-20261204-150000-000000.json").write_text("{not json")
    saved = compare_runs.save_result(fixed_result())
    screen = CompareScreen(files=[], make_engine=TextEngine)
    async with Host(screen).run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(screen.app.screen, PastRunsScreen))
        past = screen.app.screen
        assert past.query_one(OptionList).option_count == 1
        note = text_of(past.query_one("#past-note"))
        assert note.startswith("skipped compare-20261204-150000-000000.json: not a readable")
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.result == saved)
        assert screen.app.screen is screen
        table = screen.query_one(CompareTable)
        assert table.row_count == 3
        assert str(table.get_cell(saved.runs[1].path, "status")) == "★ best, ok"
        assert "★ best trade-off: SmolLM2.Q4_1.gguf" in text_of(screen.query_one("#cmp-best"))
        assert screen.query_one("#cmp-text", Input).value == "/texts/apache-2.0.txt"
        assert screen.query_one("#cmp-ctx", Input).value == "128"
        screen.query_one("#cmp-budget", Input).value = "1"  # a looser budget: Q2_K is in
        await wait_until(pilot, lambda: "Q2_K" in text_of(screen.query_one("#cmp-best")))
        assert str(table.get_cell(saved.runs[2].path, "status")) == "★ best, ok"


def test_compare_screen_snapshot(snap_compare, monkeypatch):
    monkeypatch.setattr(compare_screen, "discover", lambda dirs: [])  # no machine paths
    screen = CompareScreen(files=[])

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: "loadable" in text_of(screen.query_one("#cmp-status")))
        screen.reopen(fixed_result())
        await wait_until(pilot, lambda: screen.query_one(CompareTable).row_count == 3)
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
async def test_real_model_scores_a_text_through_the_screen_and_the_lesson_quotes_it(tmp_path):
    """Over the chat on the real model: the run's rows are what the lesson's fit step quotes."""
    q8 = quantize.quantize(bundled(), "Q8_0", tmp_path, nthread=2).output
    load = LoadOptions(bundled(), n_ctx=512, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(load), config=Config(autotune=False))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
        app.call_later(app.action_compare_models, [q8, bundled()])  # F10 with these files
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        screen.n_threads = 1
        await wait_until(pilot, lambda: len(screen.query_one(SelectionList).selected) == 2)
        screen.query_one("#cmp-tokens", Input).value = "4"
        screen.query_one("#cmp-text", Input).value = str(APACHE)
        screen.query_one("#cmp-ctx", Input).value = "128"
        await pilot.press("ctrl+r")
        table = screen.query_one(CompareTable)
        await wait_until(
            pilot,
            lambda: "tokens" in str(table.get_cell(q8, "status")) if q8 in table.rows else 0,
            timeout=60,
        )
        await wait_until(pilot, lambda: screen.busy == "", timeout=180)
        result = screen.result
        assert result is not None, text_of(screen.query_one("#cmp-status"))
        runs = {r.quant: r for r in result.runs}
        assert runs["Q8_0"].is_reference and runs["Q8_0"].scored_tokens == 1071
        assert runs["Q8_0"].perplexity == pytest.approx(16.598, rel=0.01)
        assert runs["Q4_1"].mean_kl == pytest.approx(0.009525, rel=0.05)
        assert "★ best trade-off: SmolLM2-135M-Instruct.Q4_1.gguf" in text_of(
            screen.query_one("#cmp-best")
        )
        assert "mean KLD vs the reference" in text_of(screen.query_one("#cmp-bars"))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.chat_screen)
        app.chat_screen.lesson.start(lesson.step_index("fit"))
        await pilot.pause(0.1)
        text = " ".join(app.query_one(LessonStrip).render().plain.split())
        for r in result.runs:
            assert f"{r.quant} {gib(r.size_bytes)} {decode_text(r.decode_tps)}" in text
        q4 = runs["Q4_1"]
        assert f"KLD {q4.mean_kl:.4f}, top-1 {q4.top1_agreement:.0%}" in text
    assert saved_runs()[0][0].result == result


async def test_f10_compares_with_configs_gpu_layers_threads_flash_attn_repack(monkeypatch):
    """README: n_gpu_layers, threads, flash_attn and repack apply to compare, F10 included:
    the chat hands the compare screen the options `chatapp compare` would load with."""
    from chatapp import paths
    from chatapp.cli import main
    from chatapp.ui import launch

    config = paths.config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("n_gpu_layers = 3\nthreads = 2\nflash_attn = true\nrepack = false\n")
    built = []
    monkeypatch.setattr(launch, "run_chat_app", lambda options, **kw: built.append((options, kw)))
    with pytest.raises(SystemExit) as done:
        main(["chat", bundled()])
    assert done.value.code in (0, None) and len(built) == 1
    options, kwargs = built[0]
    app = launch.build_app(options, **kwargs)
    app.slot.factory = lambda: TextEngine(options)  # no worker: the screen is the point
    seen = []

    def fake_compare(files, **kw):
        seen.append(kw["options"])
        raise EngineError("stop here")

    monkeypatch.setattr(compare, "compare", fake_compare)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f10")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        opts = screen.options
        assert opts is not None
        assert (opts.n_gpu_layers, opts.n_threads, opts.flash_attn, opts.repack) == (
            3, 2, True, False,
        )  # fmt: skip
        screen._compare([bundled(), bundled()], screen.query_one(CompareSetup).read())
        await wait_until(pilot, lambda: seen)
        assert seen == [opts]


async def test_a_run_leaves_the_screen_a_running_message_pump(tmp_path):
    """The file being run is the screen's own note, not Textual's MessagePump._running: a
    screen whose is_running reads "" (or a path) is taken as stopped (signals, check_idle)."""
    files = links(tmp_path, "Q8_0", "Q4_1")
    text = tmp_path / "text.txt"
    text.write_text("word " * 400)
    screen = fake_screen(files)
    async with Host(screen).run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(screen.query_one(SelectionList).selected) == 2)
        screen.query_one("#cmp-text", Input).value = str(text)
        screen.query_one("#cmp-ctx", Input).value = "64"
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: screen.result is not None)
        assert screen.is_running is True
