"""Two files side by side (`chatapp chat A --vs B`): one prompt, two replies, where they part."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import wait_until
from scripted_engine import ScriptedEngine

from chatapp.chat.recorder import ChatHistory
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions, Token
from chatapp.history.store import Store
from chatapp.models import quantize
from chatapp.models.bundled import smollm2_path
from chatapp.sampling import SamplerSettings
from chatapp.ui.versus import VersusApp, parting_step
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


async def _ask(pilot, app: VersusApp, text: str) -> None:
    await wait_until(pilot, lambda: all(s.engine is not None for s in app.slots.values()))
    box = app.query_one("#prompt")
    box.value = text
    box.focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.streaming and len(app.finished) == 2)


async def test_both_replies_stream_and_the_parting_step_is_marked(tmp_path):
    a, b = ScriptedEngine(), PartingEngine()
    store = Store(tmp_path / "history.db")
    app = VersusApp((lambda: a, lambda: b), ("a.gguf", "b.gguf"))
    app.sessions["a"].history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await _ask(pilot, app, "Hello")
        cols = app.column("a"), app.column("b")
        assert all(len(c.tokens) > 5 for c in cols)
        assert parting_step(cols[0].tokens, cols[1].tokens) == 3
        assert "part at step 3" in str(app.query_one("#status").render())
        speed = str(app.query_one("#speed-b").render())
        assert "decode" in speed and "tokens" in speed
        # Walk back to a step: both panels show that step's candidates, each file's own.
        for _ in range(len(cols[0].tokens) - 3):
            await pilot.press("alt+left")
        assert app.cursor == 3
        pa, pb = app.query_one("#probs-a", ProbPanel), app.query_one("#probs-b", ProbPanel)
        assert pa.step == pb.step == 3
        assert pa.candidates[0].id == 3 and pb.candidates[0].id == 903
        # Both requests were greedy (differences come from the files), and the history keeps
        # both replies: B's as a branch beside A's.
        assert all(r.settings.greedy for r in (*a.requests, *b.requests))
        (conversation,) = store.list_conversations()
        replies = [m for m in store.all_messages(conversation.id) if m.role == "assistant"]
        assert len(replies) == 2
        assert [m.id for m in store.messages(conversation.id)][-1] == replies[0].id
        # A sampler change goes to both files (from the next prompt here: none is streaming).
        slider = app.query_one("#slider-temperature", Slider)
        slider.set_value(0.7)
        await pilot.pause()
        assert app.sessions["a"].settings.temperature == app.sessions["b"].settings.temperature
        assert app.sessions["b"].settings.temperature == 0.7


async def test_a_file_that_cannot_load_is_one_sentence_and_the_app_stays(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")

    def broken():
        return LocalEngine(LoadOptions(model_path=str(bad), n_gpu_layers=0))

    app = VersusApp((ScriptedEngine, broken), ("a.gguf", "bad.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "error:" in str(app.query_one("#status").render()))
        status = str(app.query_one("#status").render())
        assert "B:" in status and "bad.gguf" in status and "\n" not in status.strip()
        app.query_one("#prompt").value = "Hello"
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        assert "still loading" in str(app.query_one("#status").render())


@pytest.mark.slow
async def test_two_real_files_side_by_side(tmp_path):
    q8 = quantize.quantize(smollm2_path(), "Q8_0", tmp_path, nthread=2).output
    opts = LoadOptions(model_path=str(smollm2_path()), n_ctx=1024, n_gpu_layers=0, n_threads=1)
    app = VersusApp(
        (lambda: LocalEngine(opts), lambda: LocalEngine(replace(opts, model_path=q8))),
        ("Q4_1", "Q8_0"),
        settings=SamplerSettings(temperature=0.0, max_tokens=40),
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: all(s.engine is not None for s in app.slots.values()), 60)
        await _ask(pilot, app, "Name three colours of the sea.")
        a, b = app.column("a").tokens, app.column("b").tokens
        assert a and b and all(t.candidates for t in a + b)
        speed = str(app.query_one("#speed-a").render())
        assert "1 of" in speed and "shared with the other file" in speed


def test_side_by_side_snapshot(snap_compare):
    from chatapp.metrics import GenerationStats

    pinned = GenerationStats(
        prompt_tokens=9, prompt_evaluated=9, completion_tokens=12, ttft_s=0.05, decode_s=0.12
    )
    app = VersusApp(
        (lambda: ScriptedEngine(pinned_stats=pinned), lambda: PartingEngine(pinned_stats=pinned)),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q2_K.gguf"),
        settings=SamplerSettings(temperature=0.0, max_tokens=12),
    )

    async def run_before(pilot) -> None:
        app.query_one("#prompt").cursor_blink = False
        await _ask(pilot, app, "Describe the sea at night.")
        for _ in range(6):
            await pilot.press("alt+left")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


async def test_side_by_side_takes_configs_theme_keys_and_problems():
    from chatapp.config import Config

    config = Config(theme="chatapp-light", keymap={"vs.stop": "ctrl+s"})
    app = VersusApp(
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
