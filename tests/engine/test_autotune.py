"""Tuned on first use: the worker times flash attention and threads in its idle time, a reply
in the middle goes first, the best is applied without a reload and saved for the file."""

from __future__ import annotations

import time

import pytest

from chatapp import breakdown, machine
from chatapp.engine.local.load import cpu_backend, stop_flag
from chatapp.engine.local.load.autotune import BUSY_ENV, DECODE_TOKENS, ROUNDS, AutoTune, Trial
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
    PromptEvaluated,
    Token,
)
from chatapp.sampling import SamplerSettings
from chatapp.ui.autotune_watch import describe

GREEDY = SamplerSettings(temperature=0.0, max_tokens=24)


def reply(engine, text: str) -> Finished:
    req = GenerateRequest((ChatMessage("user", text),), GREEDY)
    return next(e for e in engine.generate(req) if isinstance(e, Finished))


def wait_done(engine, limit_s: float = 240.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = engine.autotune_status()
        if status and status["state"] != "tuning":
            return status
        time.sleep(0.2)
    raise AssertionError(f"the tune did not end in {limit_s} s: {status}")


@pytest.mark.slow
def test_a_first_load_tunes_while_idle_applies_without_reload_and_is_kept(
    model_path, fresh_dirs, monkeypatch
):
    monkeypatch.setenv(BUSY_ENV, "1.0")  # a shared test machine: save whatever it measured
    with LocalEngine(LoadOptions(model_path, n_ctx=2048)) as engine:
        pid = engine.pid
        assert not engine.info.tuned
        assert engine.start_autotune()
        first = engine.autotune_status()
        assert first["state"] == "tuning"
        during = reply(engine, "Name three colours.")  # a reply goes first, and is whole
        assert during.reason.value in ("eos", "max_tokens") and during.text.strip()
        status = wait_done(engine)
        assert status["state"] == "done", status
        assert engine.pid == pid  # applied on the loaded model, no new worker
        assert engine.info.tuned
        assert (engine.info.flash_attn, engine.info.n_threads) == (
            status["flash_attn"],
            status["threads"],
        )
        for trial in status["trials"]:
            assert set(trial["decode_tps"]) == {0, max(trial["decode_tps"])}
        after = reply(engine, "Name three colours.")  # the new context answers
        assert after.text.strip() and after.stats.decode_tps > 0
        assert not engine.start_autotune()  # tuned: nothing more to do
        offload = engine.info.gpu_offload_supported
    # the machine's ceilings were measured in the same idle time, with the chosen threads
    found = machine.saved_ceilings()
    assert found and found["mem_read_gbps"] > 0 and found["compute_gflops"] > 0
    assert found["threads"] == status["threads"]
    saved = machine.tuned(model_path)
    assert saved and saved["auto"] and saved["flash_attn"] == status["flash_attn"]
    assert saved["gpu_offload"] == offload
    with LocalEngine(LoadOptions(model_path, n_ctx=2048)) as again:  # the next load uses it
        assert again.info.tuned and again.info.flash_attn == status["flash_attn"]
        assert not again.start_autotune()
    if not saved["gpu_offload"]:  # a CPU-only build: --ngl 0 runs as the default -1 does
        with LocalEngine(LoadOptions(model_path, n_ctx=2048, n_gpu_layers=0)) as cpu:
            assert cpu.info.tuned and not cpu.start_autotune()


def wait_mid_tune(engine, limit_s: float = 120.0) -> None:
    """Until the tune has timed one configuration (its scratch contexts made: decoding)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = engine.autotune_status()
        assert status["state"] == "tuning", status
        if status["done"] >= 1:
            return
        time.sleep(0.02)
    raise AssertionError(f"the tune did not get going in {limit_s} s")


@pytest.mark.slow
def test_a_message_mid_tune_goes_next_no_step_runs_while_it_is_written_and_the_tune_resumes(
    model_path, fresh_dirs, monkeypatch
):
    """The worker's own order of events: the reply began before the tune's next whole step
    ended (the step in progress stops mid-decode when a request comes), no step ran while the
    reply was written, the reply ran on the configuration in use (the trials run on scratch
    contexts only), the tune went on after it and ended; the wait is a part of the breakdown."""
    monkeypatch.setenv(BUSY_ENV, "1.0")
    with LocalEngine(LoadOptions(model_path, n_ctx=2048, n_gpu_layers=0)) as engine:
        threads_in_use = engine.info.n_threads
        assert engine.start_autotune()
        wait_mid_tune(engine)
        sent = time.perf_counter()
        events = list(engine.generate(GenerateRequest((ChatMessage("user", "Hi!"),), GREEDY)))
        status = wait_done(engine)
    assert status["state"] == "done", status
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.text.strip()
    prompt = next(e for e in events if isinstance(e, PromptEvaluated))
    prefill_began = prompt.t - prompt.prefill_s
    timeline = status["timeline"]
    (reply,) = [t for t in timeline if t[0] == "generate"]
    _, began, ended, threads = reply
    assert threads == threads_in_use
    whole = [t for t in timeline if t[0] == "step"]
    cut = [t for t in timeline if t[0] == "stopped"]
    # at most the step in progress when the message was sent ended whole before the reply
    assert len([t for t in whole if sent < t[2] <= began]) <= 1
    after = [t for t in whole + cut if t[1] >= ended]
    assert began <= prefill_began < min(t[2] for t in after)  # before the next step ended
    assert not [t for t in whole + cut if t[1] < ended and t[2] > began]  # none while writing
    assert len(after) > 1  # it went on after the reply, to its end
    assert 0 < finished.stats.tune_wait_s and sent + finished.stats.tune_wait_s <= prefill_began
    names = [p.name for p in breakdown.parts(finished.stats)]
    assert names[0] == "tune wait"


@pytest.mark.slow
def test_a_tune_asked_for_during_a_reply_begins_after_it_and_takes_none_of_its_events(
    model_path, fresh_dirs, monkeypatch
):
    """The chat asks for the tune when the model is ready, maybe as the first reply starts:
    nothing of that reply is lost to it, and the tune still runs, after the reply."""
    monkeypatch.setenv(BUSY_ENV, "1.0")
    with LocalEngine(LoadOptions(model_path, n_ctx=2048, n_gpu_layers=0)) as engine:
        req = GenerateRequest(
            (ChatMessage("user", "Count to twenty."),),
            SamplerSettings(temperature=0.0, max_tokens=48),
            ignore_eos=True,
        )
        stream = engine.generate(req)
        first = next(stream)  # the reply is under way in the worker
        assert engine.start_autotune()
        assert engine.autotune_status()["state"] == "tuning"  # asked for, begun or not
        events = [first, *stream]
        status = wait_done(engine)
    assert isinstance(events[-1], Finished) and events[-1].stats.completion_tokens == 48
    assert [e.index for e in events if isinstance(e, Token)] == list(range(48))
    assert status["state"] == "done", status
    assert events[-1].stats.tune_wait_s == 0.0  # no tune was on when it was sent
    assert "generate" not in [t[0] for t in status["timeline"]]  # it began after the reply


@pytest.mark.slow
def test_a_step_stops_mid_decode_when_its_flag_is_raised_and_the_decode_is_made_again(
    model_path, engine, fresh_dirs, monkeypatch
):
    """llama.cpp's abort callback reads the flag: the step's decode stops at once and is made
    again at the next step, so every trial still has all its timed tokens at both depths."""
    from chatapp.engine.local.load.loaded_model import LoadedModel

    monkeypatch.setenv(BUSY_ENV, "1.0")
    # loaded as the `engine` fixture's start found works on this CPU (a crash here is pytest's)
    options, _ = cpu_backend.choose(LoadOptions(model_path, n_ctx=512, n_gpu_layers=0))
    flag = stop_flag.new_flag()
    tune = AutoTune(LoadedModel(options), {"flash_attn": True, "threads": True}, 0, flag)
    for _ in range(8):  # past making the scratch contexts: each step is a decode now
        assert tune.step()
    flag[0] = 1
    assert tune.step() and tune.timeline[-1][0] == "stopped"
    assert tune.step() and tune.timeline[-1][0] == "stopped"  # still raised: stopped again
    flag[0] = 0
    while tune.step():
        pass
    assert tune.status["state"] == "done", tune.status
    for trial in tune.trials:
        assert [len(ts) for ts in trial.times.values()] == [ROUNDS * DECODE_TOKENS] * 2


@pytest.mark.slow
def test_settings_the_user_gave_are_not_tuned(model_path, fresh_dirs):
    given = LoadOptions(model_path, n_ctx=512, flash_attn=False, n_threads=1)
    with LocalEngine(given) as engine:
        assert not engine.start_autotune()
        assert engine.autotune_status() is None


def test_the_score_is_the_geometric_mean_over_the_median_tokens():
    t = Trial(True, 2)
    t.times = {0: [0.01, 0.01, 0.5], 512: [0.02, 0.02, 0.02]}  # one token hit by a burst
    assert t.rates == {0: pytest.approx(100.0), 512: pytest.approx(50.0)}
    assert t.score == pytest.approx((100.0 * 50.0) ** 0.5)


def test_what_the_chat_says():
    assert describe({"state": "tuning", "done": 3, "total": 12})[0] == (
        "tuning for this machine: 25% (your messages go first)"
    )
    line, note = describe(
        {"state": "done", "chosen": "flash attention on, 2 threads", "saved": True,
         "gain_over_before": 1.2}
    )  # fmt: skip
    assert (
        line
        == note
        == ("tuned: flash attention on, 2 threads, 1.20x the defaults (saved for this file)")
    )
    line, _ = describe({"state": "done", "chosen": "x", "saved": False, "gain_over_before": 1.0})
    assert "not saved: other programs kept the CPU busy" in line


@pytest.mark.slow
async def test_the_chat_tunes_on_first_use_and_says_what_it_chose(
    model_path, fresh_dirs, monkeypatch
):
    from helpers import wait_until

    from chatapp.config import Config
    from chatapp.ui.app import ChatApp
    from chatapp.ui.widgets.stats import StatsPanel

    monkeypatch.setenv("CHATAPP_AUTOTUNE", "1")
    monkeypatch.setenv(BUSY_ENV, "1.0")
    seen: list[str] = []
    app = ChatApp(
        lambda: LocalEngine(LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)),
        config=Config(autotune=True),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        status = app.query_one("#status-line")
        await wait_until(pilot, lambda: "tuning for this machine" in str(status.render()), 120)
        app.notify = lambda text, **kw: seen.append(text)  # what it says at the end
        await wait_until(pilot, lambda: seen, 240)
        assert seen[0].startswith("tuned: flash attention ") and "saved for this file" in seen[0]
        assert app.slot.engine.info.tuned
        assert app.query_one(StatsPanel).info.tuned
    assert machine.tuned(model_path)["auto"]


async def test_a_tune_that_crashes_the_worker_is_said_remembered_and_not_run_again(
    model_path, fresh_dirs, monkeypatch
):
    """llama.cpp crashing in a slice of the tune (SIGSEGV, as a bad kernel would) reaches the
    chat as an error, and the next start of this file does not tune (and crash) again."""
    import os
    import signal

    from helpers import status as status_line
    from helpers import wait_until

    from chatapp.config import Config
    from chatapp.ui.app import ChatApp

    monkeypatch.setenv("CHATAPP_AUTOTUNE", "1")
    options = LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options), config=Config(autotune=True))
    said: list[tuple[str, dict]] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "tuning for this machine" in status_line(app), 120)
        app.notify = lambda text, **kw: said.append((text, kw))
        os.kill(app.slot.engine.pid, signal.SIGSEGV)
        await wait_until(pilot, lambda: said, 30)
        text, kw = said[0]
        assert kw["title"] == "Tune crashed" and kw["severity"] == "error"
        assert text == (
            "the model worker died while tuning for this machine (signal SIGSEGV): this file "
            "is not tuned on first use again here (`chatapp tune` still can); start it again "
            "to continue"
        )
        assert status_line(app).startswith("error: the tune on first use crashed the model")
    assert machine.tune_crashed(model_path) == "signal SIGSEGV"
    with LocalEngine(options) as again:
        assert not again.info.tuned and not again.start_autotune()
        assert again.autotune_status() is None
