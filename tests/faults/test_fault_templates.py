"""Chat templates from the model file that fail, try to escape the sandbox, or never end: the
reply still comes (plain template), in bounded time, and the user is told why."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import SIZE, pane, run_cli, submit, wait_until

from chatapp.engine.local.load import loaded_model
from chatapp.engine.local.load.timebound import call_with_timeout
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
    Notice,
)
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp

pytestmark = pytest.mark.slow  # every test here runs the real model (with odd templates)

FAILED = "the model's chat template failed ({}); using a plain template"
NOTES = {
    "raises": FAILED.format("this template always fails"),
    "escapes": FAILED.format(
        "the template tried something unsafe: access to attribute '__class__' of 'str' "
        "object is unsafe"
    ),
    "globals": FAILED.format(
        "the template tried something unsafe: access to attribute '__init__' of 'type' "
        "object is unsafe"
    ),
    "loops": FAILED.format(f"took longer than {loaded_model.TEMPLATE_TIMEOUT_S:g} s"),
}


@pytest.mark.parametrize("name", list(NOTES))
def test_ask_notes_the_fallback_and_still_answers(template_models, name):
    t0 = time.monotonic()
    r = run_cli(
        "ask", "Say hi.", "--model", str(template_models[name]), "--max-tokens", "4",
        "--temperature", "0", "--ctx", "512", "--ngl", "0",
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"note: {NOTES[name]}"
    assert lines[-1].startswith("TTFT ") and "| 4 tokens |" in lines[-1]
    assert r.stdout.strip(), "the model answered through the plain template"
    assert "pwned" not in r.stdout + r.stderr
    assert elapsed < loaded_model.TEMPLATE_TIMEOUT_S + 20


def test_side_pipe_template_render_is_bounded_too(template_models):
    """LocalEngine.render_prompt() renders on the worker's side thread, where SIGALRM cannot
    reach: a looping template must still give up in bounded time."""
    eng = LocalEngine(
        LoadOptions(model_path=str(template_models["loops"]), n_ctx=512, n_gpu_layers=0)
    )
    eng.start()
    result: list = []
    req = GenerateRequest((ChatMessage("user", "hi"),), SamplerSettings(max_tokens=2))
    try:
        thread = threading.Thread(target=lambda: result.append(eng.render_prompt(req)))
        thread.daemon = True
        thread.start()
        thread.join(loaded_model.TEMPLATE_TIMEOUT_S + 5)
        assert result, "render_prompt() did not return: the side thread loops forever"
        text, warning = result[0]
        assert warning == NOTES["loops"]
        assert text.endswith("Assistant:")
    finally:
        eng.kill()
        eng.close()


async def test_tui_tells_the_user(template_models):
    path = str(template_models["raises"])
    app = ChatApp(lambda: LocalEngine(LoadOptions(model_path=path, n_ctx=512, n_gpu_layers=0)))
    pane(app).session.settings = pane(app).session.settings.with_(max_tokens=3, temperature=0.0)
    async with app.run_test(size=SIZE) as pilot:
        await submit(pilot, app, "Hi")
        await wait_until(pilot, lambda: len(pane(app).session.conversation) == 2, timeout=60)
        notes = [(n.title, n.message) for n in app._notifications]
        assert ("Note", NOTES["raises"]) in notes
        assert pane(app).session.conversation[1].content.strip()


def test_time_bound_in_a_thread_leaves_no_stray_exception():
    """Racing the timer (it fires about when the work ends) never raises later, elsewhere."""
    outcomes: list[str] = []

    def run() -> None:
        for j in range(200):
            n = 20_000 * (1 + j % 10)  # about 1 to 12 ms of bytecode: either side of the limit
            try:
                call_with_timeout(lambda n=n: [i * i for i in range(n)], 0.005)
                outcomes.append("done")
            except TimeoutError as exc:
                assert str(exc) == "took longer than 0.005 s"
                outcomes.append("timeout")
        time.sleep(0.05)
        [i * i for i in range(100_000)]  # a stray async exception would surface here
        outcomes.append("clean")

    busy = threading.Event()

    def burn() -> None:  # another busy thread: the timer then often fires at awkward moments
        while not busy.is_set():
            sum(range(1000))

    burner = threading.Thread(target=burn, daemon=True)
    burner.start()
    thread = threading.Thread(target=run)
    try:
        thread.start()
        thread.join(60)
    finally:
        busy.set()
        burner.join()
    assert outcomes[-1] == "clean" and len(outcomes) == 201, outcomes[-3:]
    assert "timeout" in outcomes


def test_template_without_a_system_role_folds_it_and_says_so_once(template_models):
    """Gemma 2's template refuses a system message: the model's own template is still used
    (system text folded into the first user turn), with a note on the first reply only."""
    eng = LocalEngine(
        LoadOptions(model_path=str(template_models["no_system"]), n_ctx=512, n_gpu_layers=0)
    )
    eng.start()
    chat = (ChatMessage("system", "Be brief."), ChatMessage("user", "hi"))
    req = GenerateRequest(chat, SamplerSettings(max_tokens=2, temperature=0.0))
    try:
        text, warning = eng.render_prompt(req)
        assert warning == loaded_model.FOLDED_SYSTEM_NOTE
        assert text.endswith(
            "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\n"
        )
        notes = []
        for _ in range(2):
            events = list(eng.generate(req))
            notes.append([e.message for e in events if isinstance(e, Notice)])
            assert isinstance(events[-1], Finished)
        assert notes == [[loaded_model.FOLDED_SYSTEM_NOTE], []]
    finally:
        eng.kill()
        eng.close()
