"""Two files side by side (`chatapp chat A --vs B`): one prompt, two replies, where they part."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes.engines import ScriptedEngine
from helpers import wait_until
from textual.worker import WorkerState

from chatapp.chat.recorder import ChatHistory
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions, Token
from chatapp.history.store import Store
from chatapp.models import quantize
from chatapp.models.bundled import smollm2_path
from chatapp.sampling import SamplerSettings
from chatapp.ui.launch import versus_app
from chatapp.ui.screens import versus as versus_screen
from chatapp.ui.screens.versus import GREEDY as GREEDY_TEST
from chatapp.ui.screens.versus import VersusScreen, parting_step
from chatapp.ui.streaming import ReplyStream
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import Slider

SIZE = (160, 44)


class PartingEngine(ScriptedEngine):
    """Agrees with the scripted engine's top choices for three steps, then prefers another."""

    def generate(self, request):
        for event in super().generate(request):
            if isinstance(event, Token) and event.index >= 3:
                first = replace(event.candidates[0], id=900 + event.index)
                event = replace(event, candidates=(first, *event.candidates[1:]))
            yield event


def _screen(app) -> VersusScreen:
    assert isinstance(app.screen, VersusScreen)
    return app.screen


def _loaded(app) -> bool:
    return all(s.engine is not None for s in _screen(app).slots.values())


def _both_done(app) -> bool:
    """Both replies over and the screen has settled them (each column records its end before
    the screen hears of it: the status lines and the parting step come a message later)."""
    screen = _screen(app)
    columns = screen.columns.values()
    return screen.settled and all(c.finished is not None and not c.pane.busy for c in columns)


def _status(app) -> str:
    return str(app.query_one("#vs-status").render())


async def _ask(pilot, app, text: str, timeout: float = 20.0) -> None:
    await wait_until(pilot, lambda: _loaded(app), timeout)
    box = app.query_one("#vs-prompt")
    box.text = text
    box.focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: _both_done(app), timeout)


async def test_both_replies_stream_and_the_parting_step_is_marked(tmp_path):
    a, b = ScriptedEngine(), PartingEngine()
    store = Store(tmp_path / "history.db")
    app = versus_app(
        (lambda: a, lambda: b), ("a.gguf", "b.gguf"), history=ChatHistory(store, print)
    )
    async with app.run_test(size=SIZE) as pilot:
        await _ask(pilot, app, "Hello")
        screen = _screen(app)
        cols = screen.columns["a"], screen.columns["b"]
        assert all(len(c.tokens) > 5 for c in cols)
        assert parting_step(cols[0].tokens, cols[1].tokens) == 3
        assert "part at step 3" in _status(app)
        speed = str(cols[1].pane.query_one("#status-line").render())
        assert speed.startswith(f"done: {cols[1].finished.reason} · 1 of ")
        assert speed.endswith("cores, shared")  # (both scripted files run on the CPU)
        assert "decode" in cols[1].pane.chat.items()[-1].footer
        # Each pane shows the prompt and its own reply, marked from the parting step on.
        for col in cols:
            user, reply = col.pane.chat.items()
            assert "Hello" in user.text and reply.text.strip().startswith("The sea")
            assert reply.marked is not None
            assert [marked for _t, marked in reply.marked][2:5] == [False, True, True]
        # Walk back to a step: both panels show that step's candidates, each file's own.
        for _ in range(len(cols[0].tokens) - 3):
            await pilot.press("alt+left")
        assert screen.cursor == 3
        pa = screen.holders["a"].query_one(ProbPanel)
        pb = screen.holders["b"].query_one(ProbPanel)
        assert pa.step == pb.step == 3
        assert pa.candidates[0].id == 3 and pb.candidates[0].id == 903
        assert cols[0].pane.chat.items()[-1].marked_cursor == 3
        # Both requests were greedy (differences come from the files), and the history keeps
        # both replies: B's as a branch beside A's.
        assert all(r.settings.greedy for r in (*a.requests, *b.requests))
        (conversation,) = store.list_conversations()
        replies = [m for m in store.all_messages(conversation.id) if m.role == "assistant"]
        assert len(replies) == 2
        assert [m.id for m in store.messages(conversation.id)][-1] == replies[0].id
        # Both panes' Ended messages can reach the screen after both columns finished (they
        # bubble through each column first): a late one keeps nothing twice.
        screen.post_message(ReplyStream.Ended(0, cols[1].finished))
        await pilot.pause()
        assert len([m for m in store.all_messages(conversation.id) if m.role == "assistant"]) == 2
        # A sampler change goes to both files (from the next prompt here: none is streaming).
        slider = app.query_one("#slider-temperature", Slider)
        slider.set_value(0.7)
        await pilot.pause()
        sessions = [c.pane.session for c in cols]
        assert sessions[0].settings.temperature == sessions[1].settings.temperature == 0.7


async def test_one_prompt_twice_each_pane_keeps_its_conversation():
    """The second prompt goes to both panes after the first replies: each pane's own session
    sends it with its own earlier reply (its engine's request holds four messages)."""
    a, b = ScriptedEngine(), PartingEngine()
    app = versus_app((lambda: a, lambda: b), ("a.gguf", "b.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await _ask(pilot, app, "Hello")
        await _ask(pilot, app, "And again")
        for engine in (a, b):
            assert [m.role for m in engine.requests[-1].messages][-3:] == [
                "user", "assistant", "user"
            ]  # fmt: skip
        for col in _screen(app).columns.values():
            assert [item.role for item in col.pane.chat.items()] == ["user", "assistant"] * 2
            assert not col.pane.chat.items()[-1].branch  # (alt+left/right walk steps here)
        assert "part at step 3" in _status(app)


async def test_esc_stops_both_replies():
    slow = ScriptedEngine(delay=0.2), ScriptedEngine(delay=0.2)
    app = versus_app((lambda: slow[0], lambda: slow[1]), ("a.gguf", "b.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _loaded(app))
        box = app.query_one("#vs-prompt")
        box.text = "Hello"
        box.focus()
        await pilot.press("enter")
        screen = _screen(app)
        await wait_until(pilot, lambda: all(c.tokens for c in screen.columns.values()))
        replying = [w for w in app.workers if w.group.startswith("generate")]
        assert [w.state for w in replying] == [
            WorkerState.RUNNING
        ] * 2  # one does not stop the other
        await pilot.press("escape")
        await wait_until(pilot, lambda: _both_done(app))
        assert {str(c.finished.reason) for c in screen.columns.values()} == {"cancelled"}
        assert all(len(c.tokens) < 10 for c in screen.columns.values())


async def test_a_file_that_cannot_load_is_one_sentence_and_the_app_stays(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")

    def broken():
        return LocalEngine(LoadOptions(model_path=str(bad), n_gpu_layers=0))

    app = versus_app((ScriptedEngine, broken), ("a.gguf", "bad.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "error:" in _status(app))
        status = _status(app)
        assert "B:" in status and "bad.gguf" in status and "\n" not in status.strip()
        app.query_one("#vs-prompt").text = "Hello"
        app.query_one("#vs-prompt").focus()
        await pilot.press("enter")
        assert "B did not load" in _status(app)
        assert not _screen(app).busy and app.is_running


async def test_quitting_kills_both_workers():
    engines = ScriptedEngine(), ScriptedEngine()
    app = versus_app((lambda: engines[0], lambda: engines[1]), ("a.gguf", "b.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _loaded(app))
        assert app.slot.engine is None  # (the chat's own slot stays empty: nothing loads it)
    assert all(e.killed for e in engines)


@pytest.mark.slow
async def test_two_real_files_side_by_side(tmp_path):
    q8 = quantize.quantize(smollm2_path(), "Q8_0", tmp_path, nthread=2).output
    opts = LoadOptions(model_path=str(smollm2_path()), n_ctx=1024, n_gpu_layers=0, n_threads=1)
    app = versus_app(
        (lambda: LocalEngine(opts), lambda: LocalEngine(replace(opts, model_path=q8))),
        ("Q4_1", "Q8_0"),
        settings=SamplerSettings(temperature=0.0, max_tokens=40),
    )
    async with app.run_test(size=SIZE) as pilot:
        await _ask(pilot, app, "Name three colours of the sea.", timeout=60)
        screen = _screen(app)
        a, b = screen.columns["a"].tokens, screen.columns["b"].tokens
        assert a and b and all(t.candidates for t in a + b)
        speed = str(screen.columns["a"].pane.query_one("#status-line").render())
        assert "1 of" in speed and "cores, shared" in speed


async def test_the_bundled_model_against_itself_replies_in_both_panes(model_path):
    """The real model in both panes (two workers): one prompt, both panes show a reply, and
    the same greedy file agrees with itself on every step."""
    opts = LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0, n_threads=1)
    app = versus_app(
        (lambda: LocalEngine(opts), lambda: LocalEngine(opts)),
        ("SmolLM2 A", "SmolLM2 B"),
        settings=replace(GREEDY_TEST, max_tokens=16),
    )
    async with app.run_test(size=SIZE) as pilot:
        await _ask(pilot, app, "Say hello.", timeout=60)
        columns = list(_screen(app).columns.values())
        texts = [c.pane.chat.items()[-1].text for c in columns]
        assert all(text.strip() for text in texts)
        assert texts[0] == texts[1]
        assert [t.id for t in columns[0].tokens] == [t.id for t in columns[1].tokens]
        assert "agree on every step" in _status(app)


def test_side_by_side_snapshot(snap_compare, monkeypatch):
    from chatapp.metrics import GenerationStats

    monkeypatch.setattr(versus_screen, "usable_cpus", lambda: 2)  # the speed lines' "1 of 2 cores"

    pinned = GenerationStats(
        prompt_tokens=9, prompt_evaluated=9, completion_tokens=12, ttft_s=0.05, decode_s=0.12
    )
    app = versus_app(
        (lambda: ScriptedEngine(pinned_stats=pinned), lambda: PartingEngine(pinned_stats=pinned)),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q2_K.gguf"),
        settings=SamplerSettings(temperature=0.0, max_tokens=12),
    )

    async def run_before(pilot) -> None:
        app.query_one("#vs-prompt").cursor_blink = False
        await _ask(pilot, app, "Describe the sea at night.")
        for _ in range(6):
            await pilot.press("alt+left")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


async def test_side_by_side_takes_configs_theme_keys_and_problems():
    from chatapp.config import Config

    config = Config(theme="chatapp-light", keymap={"vs.stop": "ctrl+s"})
    app = versus_app(
        (ScriptedEngine, ScriptedEngine),
        ("a.gguf", "b.gguf"),
        config=config,
        notes=["config.toml: n_ctx must be a whole number"],
    )  # it used to hard-code the dark theme and drop config's keys and problems
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "chatapp-light"
        assert app._keymap.get("vs.stop") == "ctrl+s"
        shown = [n.message for n in app._notifications]
        assert "config.toml: n_ctx must be a whole number" in shown
