"""The TUI's fields that take numbers and paths, given bad values of their kind (negative,
zero, huge, nan, empty, a newline, unicode, a missing path, a folder, a name too long to look
up), with Pilot: each is refused with a sentence, nothing is loaded or run, the app stays up.
(Hostile text in the places that show it: test_hostile_text.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SIZE, Host, bundled, text_of, wait_until
from textual.widgets import DataTable, Input, SelectionList

from chatapp.engine.protocol import LoadOptions
from chatapp.models import fit
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.model_card import ModelCardScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.widgets.model_card import CardView

pytestmark = pytest.mark.usefixtures("fresh_dirs")

NO_GPU = (None, 8 * fit.GIB)
BAD_WHOLE = ["-2", "0", str(10**12), str(2**64), "", "x", "1.5", "nan", "\n"]
BAD_NUMBER = ["-1", "0", "nan", "inf", "-inf", "1e308", "", "x", "2001", "1e-9"]
LONG_NAME = "x" * 5000  # longer than a file name may be: the system refuses to look it up


def bad_paths(tmp: Path) -> list[str]:
    return [
        str(tmp / "no such folder" / "model.gguf"),
        str(tmp),  # a folder
        "",
        " ",
        "\n",
        "a\nb",
        "日本語 ✓.gguf",
        "[bold]x[/]",
        "\x1b[31mx",
        LONG_NAME,
        f"{tmp}/{LONG_NAME}.gguf",
        "user--x/m",
    ]


async def test_the_model_pickers_path_ctx_and_gpu_layers_refuse_bad_values(tmp_path):
    screen = ModelPickerScreen(LoadOptions(bundled(), n_ctx=2048), machine=lambda: NO_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: screen.query_one(CardView).card is not None)
        note = screen.query_one("#picker-note")
        path = screen.query_one("#model-path", Input)
        for value in [v for v in bad_paths(tmp_path) if v.strip()]:  # (blank: the table's pick)
            path.value = value
            path.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is screen and app.results == [], value
            assert text_of(note), repr(value)
        path.value = ""
        await wait_until(pilot, lambda: screen.picked is not None and not screen.picked.error)
        for field, sentence in (("#model-ctx", "ctx must be"), ("#model-ngl", "GPU layers must")):
            for value in [*BAD_WHOLE, "10"] if field == "#model-ctx" else ["-2", "99", "", "x"]:
                screen.query_one(field, Input).value = value
                screen.query_one(DataTable).focus()
                await pilot.press("enter")
                await pilot.pause()
                assert app.results == [], (field, value)
                assert text_of(note).startswith(sentence), (field, value, text_of(note))
            screen.query_one(field, Input).value = "0" if field == "#model-ngl" else "1024"
        assert app.screen is screen


async def test_the_model_cards_what_if_fields_refuse_bad_numbers():
    screen = ModelCardScreen(bundled(), n_ctx=2048, n_gpu_layers=0, machine=lambda: NO_GPU)
    app = Host(screen)
    async with app.run_test(size=SIZE) as pilot:
        out = screen.query_one("#what-if")
        await wait_until(pilot, lambda: "Q4_K_M" in text_of(out))
        for field in ("#whatif-params", "#whatif-mem"):
            for value in BAD_NUMBER if field == "#whatif-params" else [*BAD_NUMBER[:8], "100001"]:
                screen.query_one(field, Input).value = value
                await pilot.pause()
                assert text_of(out) == "give a positive number of billions and of GiB", value
            screen.query_one(field, Input).value = "7" if field == "#whatif-params" else "24"
            await wait_until(pilot, lambda: "Q4_K_M" in text_of(out))
        assert app.screen is screen


async def test_the_compare_screens_fields_refuse_bad_values_before_anything_runs(tmp_path):
    files = []
    for quant in ("Q8_0", "Q4_1"):
        (tmp_path / f"model.{quant}.gguf").symlink_to(bundled())
        files.append(str(tmp_path / f"model.{quant}.gguf"))
    screen = CompareScreen(files=files, n_threads=1, tokens=4, make_engine=_never)
    async with Host(screen).run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(screen.query_one(SelectionList).selected) == 2)
        status = screen.query_one("#cmp-status")
        text = screen.query_one("#cmp-text", Input)
        for value in [v for v in bad_paths(tmp_path) if v.strip()]:  # (blank: no text file)
            text.value = value
            await pilot.press("ctrl+r")
            await pilot.pause()
            assert screen.busy == "" and status.has_class("error"), value
            assert text_of(status).startswith("no text file at"), (value, text_of(status))
        text.value = ""
        for value in BAD_WHOLE + ["513"]:
            screen.query_one("#cmp-tokens", Input).value = value
            await pilot.press("ctrl+r")
            await pilot.pause()
            assert screen.busy == "" and text_of(status).startswith("tokens must be"), value
        screen.query_one("#cmp-tokens", Input).value = "4"
        for value in ["-1", "nan", "inf", "", "x"]:
            screen.query_one("#cmp-budget", Input).value = value
            await pilot.pause()
            assert text_of(status) == "the KLD budget must be a number, 0 or more", value
        assert screen.app.screen is screen


def _never(options):
    raise AssertionError("a bad field must not start a run")
