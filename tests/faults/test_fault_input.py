"""Hostile input: a 1 MB paste, control characters and escape sequences in the prompt and in the
model's output, prompts longer than the context, out-of-range options."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from fakes.engines import HOSTILE, HostileEngine, ScriptedEngine
from helpers import REPO, SIZE, one_error_line, pane, run_cli, screen_text, status, wait_until
from textual import events

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    LoadOptions,
)
from chatapp.textsafe import printable
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.chat import SHOWN_CHARS

LINE = "The quick brown fox jumps over the lazy dog; 0123456789 é ü — ✓\n"
MEGABYTE = (LINE * (1_000_000 // len(LINE) + 1))[:1_000_000]
TOO_LONG = (
    r"error: the prompt is (\d+) tokens but the context holds {n}; shorten it, clear the chat "
    r"or load with a larger --ctx"
)
# The chat checks a message before it sends it (chat/attachments.message_fit_problem).
INPUT_TOO_LONG = (
    r"the message is ([\d,]+) tokens and the reply needs [\d,]+, but the context holds {n}; "
    r"shorten it, or load the model with a larger --ctx"
)

RAW = ["\x1b", "\x00", "\x07", "\x9b", "\ud800", "\x08", "\r", "\x7f"]


def assert_no_raw(text: str) -> None:
    found = [repr(c) for c in RAW if c in text]
    assert not found, f"raw control characters reach the screen: {found}"


async def _paste(pilot, app: ChatApp, text: str) -> None:
    app.query_one("#prompt").focus()
    app.post_message(events.Paste(text))  # as the terminal driver delivers a paste
    # One kind of line end; control characters become visible symbols in the box itself.
    expected = printable(text.replace("\r", "\n"))
    await wait_until(pilot, lambda: app.query_one("#prompt").text == expected)


async def test_control_characters_are_shown_as_symbols():
    app = ChatApp(lambda: HostileEngine())
    pasted = "paste:" + "".join(HOSTILE)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await _paste(pilot, app, pasted)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(pane(app).session.conversation) == 2)
        await pilot.pause()
        # Nothing lost: what was pasted is sent as the symbols the box showed; the reply's
        # control characters stay exact in the conversation.
        assert pane(app).session.conversation[0].content == printable(pasted.replace("\r", "\n"))
        assert pane(app).session.conversation[1].content == "".join(" " + w for w in HOSTILE)
        shown = screen_text(app)
        assert_no_raw(shown)
        assert "paste:␛[31mred␛[0m" in shown  # the user's message
        assert "␛[31mred␛[0m ␛]0;pwned␇" in shown and "nul␀byte" in shown  # the reply
        app.query_one("#tabs").active = "tab-tokens"  # the token strip and the prompt tokens
        await pilot.pause()
        assert_no_raw(screen_text(app))
        await pilot.press("f4")
        await pilot.pause()
        assert_no_raw(screen_text(app))
        svg = app.export_screenshot()
        assert "\x1b" not in svg and "&#27;" not in svg and "&#x1b;" not in svg.lower()


async def test_pasted_control_characters_in_the_prompt_box():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await _paste(pilot, app, "paste:" + "".join(HOSTILE))
        assert_no_raw(screen_text(app))


@pytest.mark.slow
def test_ask_with_control_characters_and_bytes_that_are_not_utf8():
    hostile = "\x1b[31mred\x1b[0m \x07 \x9b \x7f \x1b]0;title\x07 say hi"
    r = run_cli("ask", hostile, "--max-tokens", "3", "--ctx", "512", "--ngl", "0")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("TTFT "), r.stderr
    # argv that is not UTF-8 arrives as lone surrogates (surrogateescape); NUL cannot be in argv.
    raw = subprocess.run(
        [sys.executable.encode(), b"-m", b"chatapp.cli", b"ask", b"bad \xff\xfe bytes \x1b[2J",
         b"--max-tokens", b"3", b"--ctx", b"512", b"--ngl", b"0"],
        capture_output=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert raw.returncode == 0, raw.stderr
    assert b"Traceback" not in raw.stderr
    assert raw.stderr.strip().splitlines()[-1].startswith(b"TTFT "), raw.stderr


@pytest.mark.slow
async def test_megabyte_paste_into_a_small_context(model_path):
    options = LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
        prompt = app.query_one("#prompt")
        prompt.focus()
        app.post_message(events.Paste(MEGABYTE))
        await wait_until(pilot, lambda: len(prompt.text) == len(MEGABYTE), timeout=60)
        await pilot.press("enter")
        # refused before it is sent: one sentence with the numbers, the text stays in the input
        await wait_until(pilot, lambda: "but the context holds 512" in status(app), 120)
        m = re.fullmatch(INPUT_TOO_LONG.format(n=512), status(app))
        assert m, status(app)
        assert int(m.group(1).replace(",", "")) > 400_000  # ~29 tokens per line of LINE
        assert (
            prompt.text == MEGABYTE and pane(app).session.conversation == []
        )  # nothing lost, nothing sent
        assert pane(app).chat.items() == []
        assert app.slot.engine is not None and app.slot.engine.alive, "the worker survives it"


async def test_megabyte_message_does_not_freeze_the_ui():
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)

        async def shown_in(text: str) -> float:
            t0 = time.perf_counter()
            await pane(app).chat.add("user", text)
            await pilot.pause()
            return time.perf_counter() - t0

        # A ratio, not seconds (a busy machine slows both alike): a megabyte costs about what
        # the part of it that is shown costs, not 50 times that as drawing it all would.
        shown = MEGABYTE[:SHOWN_CHARS]
        best_shown = min([await shown_in(shown) for _ in range(3)])
        best_mb = min([await shown_in(MEGABYTE) for _ in range(3)])
        assert best_mb < 5 * best_shown + 0.05, (best_mb, best_shown)


@pytest.mark.slow
def test_ask_prompt_longer_than_the_context():
    r = run_cli("ask", "lorem ipsum " * 300, "--ctx", "256", "--ngl", "0")
    message = one_error_line(r)
    m = re.fullmatch(TOO_LONG.format(n=256).removeprefix("error: "), message)
    assert m and int(m.group(1)) > 256, message


@pytest.mark.parametrize(
    ("args", "expected"),
    [  # each sampler flag's range and nan: tests/chat/test_cli.py
        (
            ["--min-p", "1.5"],
            "Invalid value for '--min-p': Input should be less than or equal to 1",
        ),
        (
            ["--repeat-penalty", "0.5"],
            "Invalid value for '--repeat-penalty': Input should be greater than or equal to 1",
        ),
        (
            ["--max-tokens", "0"],
            "Invalid value for '--max-tokens': Input should be greater than or equal to 1",
        ),
        (
            ["--seed", "-5"],
            "Invalid value for '--seed': Input should be greater than or equal to 0",
        ),
        (
            ["--temperature", "1e400"],
            "Invalid value for '--temperature': Input should be less than or equal to 2",
        ),
        (["--ctx", "8"], "Invalid value for '--ctx': Input should be greater than or equal to 16"),
        (["--ngl", "-2"], "Invalid value for '--ngl': Input should be greater than or equal to -1"),
        (
            ["--threads", "0"],
            "Invalid value for '--threads': Input should be greater than or equal to 1",
        ),
    ],
)
def test_out_of_range_options_name_the_range(args, expected):
    r = run_cli("ask", "hi", *args)
    assert one_error_line(r, code=2) == expected
