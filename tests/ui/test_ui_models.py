"""Pilot tests of the model screens: picker, card, compare (real headers, real llama.cpp runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.engines import BrokenEngine
from helpers import SIZE, Host, bundled, text_of, wait_until
from textual.widgets import Button, DataTable, Input, SelectionList, Static

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.models import fit
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.model_card import ModelCardScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.widgets.compare_view import CompareTable, RepliesView
from chatapp.ui.widgets.model_card import CardView, FitView

NO_GPU = (None, 8 * fit.GIB)  # (free GPU memory, free RAM): a CPU box with 8 GiB free
SMALL_GPU = (200 * fit.MIB, 8 * fit.GIB)  # too little GPU memory for every layer


pytestmark = pytest.mark.usefixtures("fresh_dirs")


# ---- the picker ---------------------------------------------------------------------------------


async def test_picker_lists_the_bundled_model_with_its_card_and_fit():
    screen = ModelPickerScreen(
        LoadOptions(bundled(), n_ctx=2048, n_gpu_layers=0), machine=lambda: NO_GPU
    )
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        table = screen.query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count > 0)
        row = table.get_row(bundled())
        assert str(row[0]) == "SmolLM2-135M-Instruct.Q4_1.gguf" and str(row[1]) == "Q4_1"
        fit_view = screen.query_one(FitView)
        await wait_until(pilot, lambda: fit_view.report is not None)
        card = screen.query_one(CardView).card
        assert card.quant == "Q4_1" and card.n_layers == 30
        shown = text_of(screen.query_one(CardView))
        assert "llama" in shown and "Q4_1" in shown and "49,152" in shown
        e = fit_view.report.estimate
        assert e.n_ctx == 2048 and e.kv_bytes > 0 and e.compute_bytes > 0
        memory = text_of(fit_view)
        assert "KV cache" in memory and "ctx 2,048" in memory and "fits" in memory
        assert "no GPU found" in memory
        # a larger ctx is shown before loading: the KV cache grows with it
        screen.query_one("#model-ctx", Input).value = "8192"
        await wait_until(pilot, lambda: fit_view.report.estimate.n_ctx == 8192)
        assert fit_view.report.estimate.kv_bytes == 4 * e.kv_bytes


async def test_picker_fit_with_a_small_gpu_says_how_many_layers_fit():
    screen = ModelPickerScreen(LoadOptions(bundled(), n_ctx=4096), machine=lambda: SMALL_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        fit_view = screen.query_one(FitView)
        await wait_until(
            pilot, lambda: fit_view.report is not None and fit_view.report.gpu_free_bytes
        )
        report = fit_view.report
        assert 0 <= report.gpu_layers_fit < 31  # not every layer of 31 fits in 200 MiB - reserve
        memory = text_of(fit_view)
        assert f"{report.gpu_layers_fit} of 31 fit" in memory and "does not fit" in memory


async def test_a_typed_non_gguf_path_shows_the_error_and_cannot_be_loaded(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("<!DOCTYPE html><html>not found</html>")
    screen = ModelPickerScreen(LoadOptions(bundled()), machine=lambda: NO_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: screen.query_one(DataTable).row_count > 0)
        path_input = screen.query_one("#model-path", Input)
        path_input.focus()
        path_input.value = str(bad)
        card = screen.query_one(CardView)
        await wait_until(pilot, lambda: "not a GGUF model file" in card.error)
        assert "failed download" in card.error and card.has_class("error")
        assert screen.query_one("#load", Button).disabled
        assert screen.query_one(FitView).report is None
        await pilot.press("enter")  # Enter in the path box tries to load it
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert app.screen is screen and app.results == []
        assert "cannot be loaded" in text_of(screen.query_one("#picker-note", Static))


async def test_selecting_the_bundled_model_dismisses_with_load_options():
    current = LoadOptions(bundled(), n_ctx=4096, n_gpu_layers=-1, n_threads=1)
    screen = ModelPickerScreen(current, machine=lambda: NO_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        table = screen.query_one(DataTable)
        await wait_until(pilot, lambda: screen.query_one(CardView).card is not None)
        screen.query_one("#model-ctx", Input).value = "10"  # below the minimum: refused
        table.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.results == [] and "ctx must be" in text_of(screen.query_one("#picker-note"))
        screen.query_one("#model-ctx", Input).value = "1024"
        screen.query_one("#model-ngl", Input).value = "0"
        table.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.results)
    assert app.results == [LoadOptions(bundled(), n_ctx=1024, n_gpu_layers=0, n_threads=1)]


# ---- the card -----------------------------------------------------------------------------------


async def test_card_screen_shows_the_loaded_model_and_a_what_if_table():
    screen = ModelCardScreen(bundled(), n_ctx=2048, n_gpu_layers=0, machine=lambda: NO_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        view = screen.query_one(CardView)
        await wait_until(pilot, lambda: view.card is not None)
        card = view.card
        assert (card.architecture, card.n_layers, card.vocab_size) == ("llama", 30, 49152)
        shown = text_of(view)
        assert "llama" in shown and "30" in shown and "49,152" in shown
        assert "ctx 2,048" in text_of(screen.query_one(FitView))
        what_if = screen.query_one("#what-if", Static)
        await wait_until(pilot, lambda: "Q2_K" in text_of(what_if))
        assert "8B model" in text_of(what_if) and "F16" in text_of(what_if)
        screen.query_one("#whatif-params", Input).value = "70"
        screen.query_one("#whatif-mem", Input).value = "24"
        await wait_until(pilot, lambda: "70B model" in text_of(what_if))
        assert "24.00 GiB" in text_of(what_if)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.results == [None])


# ---- compare ------------------------------------------------------------------------------------


def engines(opts: LoadOptions):
    return BrokenEngine(opts) if "broken" in opts.model_path else LocalEngine(opts)


@pytest.mark.slow
async def test_compare_quantizes_runs_and_exports(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.symlink_to(bundled())
    screen = CompareScreen(
        source=bundled(),
        files=[str(broken)],
        n_threads=1,
        tokens=6,
        quantize_dir=tmp_path / "q",
        make_engine=engines,
    )
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        files = screen.query_one(SelectionList)
        await wait_until(pilot, lambda: len(files.selected) == 2)
        await pilot.click("#cmp-q-Q8_0")
        q8 = str(tmp_path / "q" / "SmolLM2-135M-Instruct.Q8_0.gguf")
        await wait_until(pilot, lambda: q8 in files.selected, timeout=60)
        assert screen.listed[q8].quant == "Q8_0"
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: screen.busy == "", timeout=120)
        result = screen.result
        assert result is not None, text_of(screen.query_one("#cmp-status"))
        runs = {Path(r.path).name: r for r in result.runs}
        assert runs["SmolLM2-135M-Instruct.Q8_0.gguf"].is_reference
        q4 = runs["SmolLM2-135M-Instruct.Q4_1.gguf"]
        assert q4.decode_tps and q4.top1_agreement is not None and q4.text
        assert "llama.cpp refused it" in runs["broken.gguf"].error
        table = screen.query_one(CompareTable)
        assert table.row_count == 3
        assert [str(c) for c in table.get_row(q8)[1:3]] == ["reference", "Q8_0"]
        assert str(table.get_row(str(broken))[1]) == "✗ failed"
        view = screen.query_one(RepliesView)
        await wait_until(pilot, lambda: len(view.query(".reply-text, .reply-error")) == 3)
        replies = [text_of(s) for s in view.query(".reply-text, .reply-error")]
        assert q4.text in replies and runs["SmolLM2-135M-Instruct.Q8_0.gguf"].text in replies
        assert any("llama.cpp refused it" in r for r in replies)
        assert "decode speed" in text_of(screen.query_one("#cmp-bars"))
        assert "1 failed" in text_of(screen.query_one("#cmp-status"))
        await pilot.press("ctrl+s")
        exported = list((tmp_path / "cache" / "compare").glob("*.md"))
        assert len(exported) == 1
        markdown = exported[0].read_text()
        assert "| file | quant |" in markdown and q4.text in markdown
        assert any(str(exported[0]) in n.message for n in app._notifications)
        assert app.screen is screen  # still usable after a failed file
