"""Pilot tests of F8's Get models view against the fake Hub: search, a repo's files judged for
this machine, downloads in the app (progress, stop and resume, compare), names typed in F8."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from fakes import gguf_files
from fakes.hub import FakeHub
from fakes.tool_folders import ollama_blob, ollama_manifest
from helpers import chat_app, pane, send, wait_until
from test_ui_models import Host
from textual.widgets import DataTable, Input, SelectionList, Static, TabbedContent

from chatapp import machine
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path
from chatapp.models.hub import download
from chatapp.models.hub.repo_files import list_repo
from chatapp.models.hub.speed import Calibration
from chatapp.models.sources import hf_cache
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.widgets.get_models import GetModelsView
from chatapp.ui.widgets.model_card import CardView

REPO = "test/Tiny-GGUF"
OTHER = "test/Tiny-Instruct-GGUF"
MB = 1 << 20
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
SIZES = {"Q2_K": 1 * MB, "Q4_K_M": 3 * MB // 2, "Q8_0": 5 * MB // 2, "F16": 9 * MB // 2}

pytestmark = pytest.mark.usefixtures("fresh_dirs")


def gguf(n: int, seed: int) -> bytes:
    """A small valid GGUF file of about n bytes (its header reads; the padding differs)."""
    pad = (bytes([seed]) * 1000 + os.urandom(24)) * (n // 1024)
    return gguf_files.build(data=b"\0" * 128 + pad)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # this machine's decode speed, as a calibration would have saved it (no 3 s decode here)
    cal = Calibration(2e9, 50.0, "SmolLM2-135M-Instruct.Q4_1.gguf", 40_000_000, time.time())
    machine.remember(decode_calibration=asdict(cal))
    with FakeHub() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        for i, (quant, size) in enumerate(SIZES.items()):
            h.add(REPO, f"tiny-{quant}.gguf", gguf(size, i + 1))
        h.add(OTHER, "tiny-instruct-Q8_0.gguf", gguf(MB, 9))
        h.repos[REPO].downloads, h.repos[OTHER].downloads = 500, 20
        yield h


def text_of(widget: Static) -> str:
    return str(widget.render())


def status(app: ChatApp) -> Static:
    return app.screen_stack[0].query_one("#status-line", Static)


async def open_get_view(pilot, app: ChatApp) -> tuple[ModelPickerScreen, GetModelsView]:
    await wait_until(pilot, lambda: app.slot.engine is not None)
    await pilot.press("f8")
    await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
    picker = app.screen
    await pilot.press("ctrl+g")
    view = picker.query_one(GetModelsView)
    await wait_until(pilot, lambda: view.calibration is not None)
    return picker, view


async def list_repo_files(pilot, view: GetModelsView, text: str = "tiny") -> None:
    view.query_one("#hub-search", Input).value = text
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(view.found) == 2)
    await pilot.press("enter")  # on the most downloaded repo
    await wait_until(pilot, lambda: view.ranked is not None)


def partial_of(name: str) -> Path:
    part = next(f for f in list_repo(REPO).files if f.filename == name).parts[0]
    return download.partial_path(REPO, part)


async def test_search_lists_repos_then_files_with_a_recommended_row(hub):
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        assert view.query_one("#hub-search", Input).has_focus
        await list_repo_files(pilot, view)
        assert [f.repo for f in view.found] == [REPO, OTHER]  # most downloaded first
        repos = view.query_one("#hub-repos", DataTable)
        assert [str(c) for c in repos.get_row(REPO)[:2]] == [REPO, "500"]
        rows = view.ranked.rows
        assert [r.quant for r in rows] == ["Q2_K", "Q4_K_M", "Q8_0", "F16"]  # smallest first
        best = [r for r in rows if r.recommended]
        assert [r.quant for r in best] == ["Q8_0"]  # the largest that fits, not past Q8_0
        assert all(r.fits and r.expected_decode_tps and not r.downloaded for r in rows)
        files = view.query_one("#hub-files", DataTable)
        assert files.has_focus
        cells = [str(c) for c in files.get_row("tiny-Q8_0.gguf")]
        assert cells[:2] == [" ★", "Q8_0"] and cells[2] == "2.6 MB" and cells[5] in ("RAM", "GPU")
        assert cells[6].startswith("~") and cells[8] == "tiny-Q8_0.gguf"
        highlighted = files.coordinate_to_cell_key(files.cursor_coordinate).row_key.value
        assert highlighted == "tiny-Q8_0.gguf"  # the cursor starts on the recommended row
        reason = text_of(view.query_one("#hub-reason", Static))
        assert reason.startswith("★ recommended: Q8_0: the largest file that fits")
        assert "tokens/s here (an estimate)" in reason
        note = text_of(view.query_one("#hub-note", Static))
        assert note == "4 files at ctx 4,096 · t/s: from a 50 t/s decode here · space marks"
        # the memory column follows F8's ctx
        before = next(r for r in rows if r.quant == "Q8_0").memory_bytes
        picker.query_one("#model-ctx", Input).value = "16384"
        await wait_until(pilot, lambda: view.ranked.rows[2].memory_bytes > before)
        assert view.n_ctx == 16384


async def test_a_download_shows_progress_lets_the_chat_go_on_and_is_selected_in_f8(hub):
    hub.throttle_bps = MB // 2  # about 5 s for the Q8_0 file: the chat answers meanwhile
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        await list_repo_files(pilot, view)
        await pilot.press("enter")  # downloads the highlighted (recommended) file
        await wait_until(pilot, lambda: app.downloads.running)
        await pilot.press("escape")  # F8 closes; the download goes on in the app
        await wait_until(pilot, lambda: not isinstance(app.screen, ModelPickerScreen))
        await wait_until(pilot, lambda: "B/s" in text_of(status(app)))
        line = text_of(status(app))
        assert line.startswith("↓ ") and "% tiny-Q8_0.gguf · Esc stops · " in line
        assert line.endswith(" left") and "MB/2.6 MB, " in line
        await send(pilot, app, "Hello")  # the chat answers meanwhile
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        assert app.downloads.running  # still going (throttled)
        await wait_until(pilot, lambda: not app.downloads.running, timeout=30)
        await wait_until(pilot, lambda: app.downloads.latest is not None)
        path = app.downloads.latest
        assert Path(path).read_bytes() == hub.repos[REPO].files["tiny-Q8_0.gguf"].source
        assert "downloaded tiny-Q8_0.gguf" in text_of(status(app))
        assert "sha256 checked" in text_of(status(app))
        assert any("selected in F8" in n.message for n in app._notifications)
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        table = picker.query_one("#model-table", DataTable)
        await wait_until(pilot, lambda: path in picker.entries)
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        assert key == path  # the new file is selected
        assert [str(c) for c in table.get_row(path)[4:]] == [
            "huggingface",
            f"{REPO}:Q8_0",
        ]  # its name, for -m


async def test_marked_files_download_one_after_another_then_f10_compares_them(hub):
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        await list_repo_files(pilot, view)
        files = view.query_one("#hub-files", DataTable)
        files.move_cursor(row=0)
        await pilot.press("space")  # Q2_K
        files.move_cursor(row=1)
        await pilot.press("space")  # Q4_K_M
        await wait_until(pilot, lambda: len(view.marked) == 2)
        assert files.get_row("tiny-Q2_K.gguf")[0] == "✓"
        await pilot.press("ctrl+d")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), timeout=30)
        compare = app.screen
        got = [str(hf_cache.repo_folder(REPO) / "snapshots" / hub.repos[REPO].commit / n)
               for n in ("tiny-Q2_K.gguf", "tiny-Q4_K_M.gguf")]  # fmt: skip
        assert compare.files == got
        listed = compare.query_one(SelectionList)
        await wait_until(pilot, lambda: set(got) <= set(listed.selected))
        assert "downloaded 2 files" in text_of(status(app))
        # F8, under F10, lists them and selects the last
        assert picker.select == got[-1]
        await wait_until(pilot, lambda: got[-1] in picker.entries)
        table = picker.query_one("#model-table", DataTable)
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == got[-1]
        assert picker.query_one("#picker-tabs", TabbedContent).active == "tab-local"
        rows = view.ranked.rows
        await wait_until(
            pilot, lambda: [r.downloaded for r in view.ranked.rows] == [True, True, False, False]
        )
        assert len(rows) == 4


async def test_esc_in_the_chat_stops_a_download_and_a_typed_name_resumes_it(hub):
    hub.throttle_bps = MB // 2  # 5 s for the Q8_0 file: time to stop it
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        await list_repo_files(pilot, view)
        await pilot.press("enter")
        await wait_until(pilot, lambda: "B/s" in text_of(status(app)))
        await pilot.press("escape")  # closes F8
        await wait_until(pilot, lambda: not isinstance(app.screen, ModelPickerScreen))
        await pilot.pause(0.3)
        await pilot.press("escape")  # no reply streams: Esc stops the download
        await wait_until(pilot, lambda: not app.downloads.running, timeout=10)
        line = text_of(status(app))
        assert line.startswith("stopped tiny-Q8_0.gguf at ") and "resumes there" in line
        partial = partial_of("tiny-Q8_0.gguf")
        kept = partial.stat().st_size
        total = SIZES["Q8_0"]
        assert 0 < kept < total + 1024 and app.downloads.latest is None
        # F8's path box takes a name: not here yet, so Enter downloads it, resuming
        hub.throttle_bps = None
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        box = picker.query_one("#model-path", Input)
        box.focus()
        box.value = f"{REPO}:q8_0"
        note = picker.query_one("#picker-note", Static)
        await wait_until(pilot, lambda: "is not on this machine" in text_of(note))
        assert str(picker.query_one("#load").label) == "Download"
        served = hub.repos[REPO].files["tiny-Q8_0.gguf"].served
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.downloads.latest is not None, timeout=30)
        assert "resumed from" in text_of(status(app))
        fetched_again = hub.repos[REPO].files["tiny-Q8_0.gguf"].served - served
        assert fetched_again == len(hub.repos[REPO].files["tiny-Q8_0.gguf"].source) - kept
        table = picker.query_one("#model-table", DataTable)
        path = app.downloads.latest
        await wait_until(
            pilot,
            lambda: (
                table.row_count
                and table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == path
            ),
        )
        assert box.value == ""  # the list has it now
        assert picker.query_one("#picker-tabs", TabbedContent).active == "tab-local"
        # now it is cached: the same name loads at once, with no network
        box.value = f"{REPO}:Q8_0"
        await wait_until(pilot, lambda: picker.picked and picker.picked.asked == box.value)
        assert picker.picked.path == path and str(picker.query_one("#load").label) == "Load"


async def test_hub_errors_are_one_line_and_the_app_keeps_running(hub, monkeypatch):
    hub.repos[OTHER].gated = True
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        note = view.query_one("#hub-note", Static)
        view.query_one("#hub-search", Input).value = "test/Nope"  # no such repo
        await pilot.press("enter")
        await wait_until(pilot, lambda: "no model repo test/Nope" in text_of(note))
        assert note.has_class("error") and "\n" not in text_of(note)
        view.query_one("#hub-search", Input).value = OTHER  # gated: a login is needed
        await pilot.press("enter")
        await wait_until(pilot, lambda: "is gated" in text_of(note))
        assert "hf auth login" in text_of(note) and "\n" not in text_of(note)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network (huggingface_hub's switch)
        view.query_one("#hub-search", Input).value = "tiny"
        await pilot.press("enter")
        await wait_until(pilot, lambda: "the Hub cannot be reached" in text_of(note))
        assert note.has_class("error") and "\n" not in text_of(note)
        assert app.screen is picker  # still here, still usable
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: picker.query_one("#model-table", DataTable).has_focus)


async def test_a_mistyped_repo_name_is_the_name_check_s_sentence(hub):
    """A USER/REPO that huggingface_hub would refuse is refused as it is typed, in the Hub's
    words, and nothing is asked of the Hub."""
    from chatapp.models.specs import hub_refuses

    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        picker, view = await open_get_view(pilot, app)
        note = view.query_one("#hub-note", Static)
        for name in ("user--x/m", "a/b..c", "a/-x"):
            view.query_one("#hub-search", Input).value = name
            await pilot.press("enter")
            await pilot.pause()
            assert text_of(note) == (
                f"{name!r} is not a Hugging Face model name ({hub_refuses(name)}): give "
                "USER/REPO, USER/REPO:QUANT or USER/REPO:FILE.gguf"
            )
            assert note.has_class("error")
        await list_repo_files(pilot, view)  # still usable
        assert app.screen is picker


async def test_f10_takes_names_as_well_as_paths(hub):
    from chatapp.models.hub.pull import pull

    got = pull(f"{REPO}:Q2_K")
    app = chat_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        app.action_compare_models([f"{REPO}:q2_k"])
        await wait_until(
            pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.is_mounted
        )
        listed = app.screen.query_one(SelectionList)
        await wait_until(pilot, lambda: str(got.path) in listed.selected)


async def test_f8_takes_an_ollama_name_and_says_when_there_is_none(tmp_path, monkeypatch):
    root = tmp_path / "ollama"
    root.mkdir()
    digest = ollama_blob(root, gguf(MB, 7))
    ollama_manifest(root, "registry.ollama.ai/library/tiny/latest", [(OLLAMA_MODEL_LAYER, digest)])
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    blob = str(root / "blobs" / f"sha256-{digest}")
    screen = ModelPickerScreen(LoadOptions(str(smollm2_path())), machine=lambda: (None, 8 << 30))
    app = Host(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: screen.query_one("#model-table", DataTable).row_count)
        box = screen.query_one("#model-path", Input)
        box.focus()
        box.value = "ollama:nothere"
        card = screen.query_one(CardView)
        await wait_until(pilot, lambda: "is not among Ollama's models" in card.error)
        assert "\n" not in card.error and screen.query_one("#load").disabled
        box.value = "ollama:tiny"  # :latest
        await wait_until(pilot, lambda: screen.picked and screen.picked.path == blob)
        assert card.card is not None and not screen.query_one("#load").disabled
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.results)
    assert app.results[0].model_path == blob


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_screenshot_of_the_get_models_view(hub, size):
    app = chat_app()
    async with app.run_test(size=size) as pilot:
        picker, view = await open_get_view(pilot, app)
        await list_repo_files(pilot, view)
        await pilot.press("space")
        await pilot.pause(0.2)
        name = f"get_models_{size[0]}x{size[1]}.svg"
        app.save_screenshot(name, os.environ.get("CHATAPP_SCREENSHOT_DIR", "/tmp"))
        for widget in view.query("Button, #hub-note, #hub-progress, #hub-reason"):
            region = widget.region
            assert region.width > 0 and region.height > 0, widget
            assert region.right <= size[0] and region.bottom <= size[1], widget
        note = view.query_one("#hub-note", Static)
        assert len(text_of(note)) <= note.region.width  # one line, not cut
        await pilot.press("ctrl+g")  # the other tab, for a look
        await wait_until(pilot, lambda: picker.query_one("#model-table").has_focus)
        await pilot.pause(0.2)
        app.save_screenshot(f"models_local_{size[0]}x{size[1]}.svg", "/tmp")
