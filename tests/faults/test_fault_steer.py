"""The Steer tab when an engine call fails: a killed worker, the model file gone. Every error
ends what the tab was doing with one sentence; the app keeps running."""

from __future__ import annotations

import os
import shutil
import signal

import numpy as np
from helpers import SIZE, add_steering, pane, steer_status, wait_until

from chatapp.chat.live_reply import LiveReply
from chatapp.engine import control_vector, steer_library
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.sampler import Slider


def _app(model_path: str) -> ChatApp:
    options = LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)
    return ChatApp(lambda: LocalEngine(options))


def _kill(engine: LocalEngine) -> None:
    proc = engine._proc
    assert proc is not None and proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)


async def test_a_slider_moved_after_the_worker_was_killed_is_one_sentence(fresh_dirs, model_path):
    """The worker died while a reply was being written, and the slider moved before the reply
    learnt it: set_steering raises EngineCrashed, which the tab turns into a sentence."""
    rng = np.random.default_rng(0)
    calm = {n: rng.standard_normal(576).astype(np.float32) for n in range(1, 30)}
    control_vector.write(
        steer_library.vector_path(model_path, "calm"), control_vector.ControlVector(calm)
    )
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        panel = await add_steering(pilot, app, "calm")
        await wait_until(pilot, lambda: bool(panel.query("#steer-strength-0")), timeout=60)
        session = pane(app).session
        _kill(app.slot.engine)
        session.draft = LiveReply([], session.settings)  # (its stream has not noticed yet)
        panel.query_one("#steer-strength-0", Slider).focus()
        await pilot.press("right")
        await wait_until(pilot, lambda: "did not reach the model" in steer_status(panel))
        text = steer_status(panel)
        assert "worker" in text and "\n" not in text.strip() and "Traceback" not in text
        assert panel.query_one("#steer-status").has_class("-error")
        assert app.is_running
        session.draft = None


async def test_a_model_file_gone_ends_the_making_with_a_sentence(fresh_dirs, model_path):
    """Add a built-in pair whose model file was deleted after it loaded: the tab says so and
    is ready again (it was left 'working' for good, every later Add refused)."""
    copy = fresh_dirs / "gone.gguf"
    shutil.copyfile(model_path, copy)
    app = _app(str(copy))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
        copy.unlink()
        panel = await add_steering(pilot, app, "happy")
        await wait_until(pilot, lambda: not panel.working, timeout=60)
        text = steer_status(panel)
        assert "gone.gguf" in text and panel.query_one("#steer-status").has_class("-error")
        assert "\n" not in text.strip() and not panel.query("#steer-strength-0")
        assert app.is_running


async def test_a_killed_worker_ends_the_making_with_a_sentence(fresh_dirs, model_path):
    app = _app(model_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None, timeout=60)
        _kill(app.slot.engine)
        panel = await add_steering(pilot, app, "happy")
        await wait_until(pilot, lambda: not panel.working, timeout=60)
        assert "worker" in steer_status(panel) and panel.query_one("#steer-status").has_class(
            "-error"
        )
        assert app.is_running
