"""The lesson's steps: their order, their texts written from the facts given, the place kept."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import numpy as np
from helpers import run_cli

from chatapp.chat import lesson
from chatapp.chat.live_reply import LiveReply
from chatapp.engine.inspection import Inspection, LayerLens, Neighbour, Ranked
from chatapp.engine.protocol import Finished, ModelInfo, PromptEvaluated
from chatapp.engine.steering import Meter, Steering, SteerVector
from chatapp.engine.token_piece import TokenPiece
from chatapp.metrics import GenerationStats
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.reply_limits import ReplyLimits

INFO = ModelInfo(
    path="/m/tiny.gguf", n_vocab=49152, n_ctx=2048, n_ctx_train=8192, load_s=0.4,
    gpu_offload_supported=False, n_gpu_layers=0, n_layers=30, n_threads=2,
    has_chat_template=True, size_bytes=270_000_000, quant="Q8_0", n_params=134_515_008,
    n_embd=576,
)  # fmt: skip
STATS = GenerationStats(
    prompt_tokens=31, prompt_evaluated=29, completion_tokens=12, ttft_s=0.0734, decode_s=0.5
)
LIMITS = ReplyLimits(
    bytes_per_token=150_000_000, kv_share=0.02, flops_per_token=270_000_000,
    decode_gbps=3.3, decode_gflops=6.0, prefill_gflops=40.0, mem_peak_gbps=11.0,
    compute_peak_gflops=90.0, mem_share=0.3, compute_share=0.07, prefill_compute_share=0.4,
    bound="overhead",
)  # fmt: skip


def _reply() -> LiveReply:
    live = LiveReply()
    live.prompt = PromptEvaluated((), "", 29, 2, 0.05, 0.0)
    live.finished = Finished("stop", "hi", STATS)
    live.limits = LIMITS
    return live


def test_the_steps_come_in_the_issues_order():
    assert lesson.IDS == ("inference", "tokens", "stream", "probs", "inside", "steer", "gpu", "fit")
    tabs = {"tab-probs", "tab-tokens", "tab-inside", "tab-steer", "tab-limits", "stats"}
    assert all(s.panel in tabs for s in lesson.STEPS)


def test_each_text_is_written_from_the_facts_given():
    facts = lesson.Facts(INFO, _reply(), {"mem_read_gbps": 11.0}, 8 << 30)
    text = {s.id: s.text(facts) for s in lesson.STEPS}
    assert "135 M parameters" in text["inference"] and "30 layers" in text["inference"]
    assert "31 tokens" in text["tokens"]  # 29 read now + 2 reused
    assert "73 ms" in text["stream"] and "22.0 t/s" in text["stream"]
    assert "30 layers" in text["inside"] and "576" in text["steer"]
    assert "3.3 GB/s" in text["gpu"] and "measured 11 GB/s" in text["gpu"]
    assert "H100" in text["gpu"] and "8.00 GiB free" in text["fit"]


def test_without_a_reply_a_step_says_what_to_do():
    facts = lesson.Facts(INFO, ceilings={"mem_read_gbps": 11.0})
    for step in ("stream", "probs", "gpu"):
        text = lesson.STEPS[lesson.step_index(step)].text(facts)
        assert "Send a message first" in text and "ms" not in text


def test_where_the_lesson_stopped_is_remembered(fresh_dirs):
    assert lesson.remembered() == 0
    lesson.remember(lesson.step_index("gpu"))
    assert lesson.remembered() == lesson.IDS.index("gpu")


def test_the_steps_are_listed_as_json(fresh_dirs):
    done = run_cli("lesson", "--steps", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) >= 8 and all(set(r) == {"id", "title", "panel", "try"} for r in rows)


def test_an_unknown_step_is_one_line_naming_the_steps(fresh_dirs):
    done = run_cli("lesson", "--step", "nope")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "inference, tokens" in done.stderr


def test_without_ceilings_the_gpu_step_says_how_to_measure_them():
    reply = _reply()
    reply.limits = None
    text = lesson.STEPS[lesson.step_index("gpu")].text(lesson.Facts(INFO, reply))
    assert "chatapp machine" in text and "GB/s" not in text


# ---- the steps that quote what was measured beside the replies ------------------------------


def _lens() -> Inspection:
    """A capture of 4 layers: ' blue' becomes the lens's top token at layer 2."""
    ranks = ((0, 90, 0.0), (1, 7, 0.01), (2, 1, 0.2), (3, 1, 0.45), (4, 1, 0.8), (5, 1, 0.8))
    layers = tuple(LayerLens(n, f"layer {n}", (), rank, p) for n, rank, p in ranks)
    return Inspection(
        position=6, tokens=tuple(range(7)), pieces=(b"x",) * 7, chosen=Ranked(42, b" blue", 0.8),
        layers=layers, attention=np.zeros((4, 2, 7), np.float32),
        neighbours=(Neighbour(42, b" blue", 1.0), Neighbour(43, b" Blue", 0.9)), n_head_kv=2,
        lens_ok=True,
    )  # fmt: skip


def _meter() -> Meter:
    """The first token is the sink; at the middle layer (2 of 4) ' sun' leans most, +1.0."""
    tokens = (TokenPiece(1, b"I"), TokenPiece(2, b" love"), TokenPiece(3, b" sun"))
    projections = np.array([[9.0, 100.0, 9, 9], [0.0, 1.0, 0, 0], [0.0, 3.0, 0, 0]], np.float32)
    return Meter(tokens, projections, sink=True)


HAPPY = SteerVector("happy", "/v/happy.gguf", 4.0)


def _text(step: str, facts: lesson.Facts) -> str:
    return lesson.STEPS[lesson.step_index(step)].text(facts)


def test_the_inside_step_quotes_the_lens_and_before_it_says_what_to_do():
    before = _text("inside", lesson.Facts(INFO, _reply()))
    assert "30 layers" in before and "After a reply it runs when this tab opens" in before
    text = _text("inside", lesson.Facts(INFO, _reply(), measured=lesson.Measured(lens=_lens())))
    assert "' blue'" in text and "position 6" in text
    assert "top token at layer 2 of 4" in text
    assert "0.20 at layer 2 and 0.80 at layer 4" in text
    assert "Nearest in the embedding: ' Blue'" in text


def test_the_inside_step_says_when_the_lens_could_not_read_the_layers():
    found = dataclasses.replace(_lens(), lens_ok=False, lens_note="the output matrix is missing")
    text = _text("inside", lesson.Facts(INFO, measured=lesson.Measured(lens=found)))
    assert "could not read the layers: the output matrix is missing" in text


def test_the_steer_step_names_the_vector_in_use_then_the_steered_reply_and_its_meter():
    assert "576 numbers" in _text("steer", lesson.Facts(INFO))
    now = Steering((HAPPY,), 5, 20)
    text = _text("steer", lesson.Facts(INFO, steering=now))
    assert "'happy' +4.00 on layers 5-20 is in use: send a message" in text
    steered = lesson.Facts(INFO, _reply(), steering=now, steered=Steering((HAPPY,)))
    text = _text("steer", steered)
    assert "steered by 'happy' +4.00 at every layer: 12 tokens at 22.0 t/s" in text
    assert "Press m here" in text
    text = _text(
        "steer", dataclasses.replace(steered, measured=lesson.Measured(meter=("happy", _meter())))
    )
    assert "The meter along 'happy' at layer 2: ' sun' leans most its way, +1.0" in text


def test_a_steering_changed_mid_reply_is_quoted_as_it_ended():
    stronger = dataclasses.replace(HAPPY, strength=-2.5)
    moved = Steering((), changes=((7, (stronger,)),))
    text = _text("steer", lesson.Facts(INFO, _reply(), steered=moved))
    assert "'happy' -2.50 at every layer (changed mid-reply from token 7)" in text


def test_the_fit_step_quotes_each_file_of_the_compare():
    before = _text("fit", lesson.Facts(INFO, memory_bytes=8 << 30))
    assert "F10 quantizes this model" in before and "KLD" not in before
    runs = (
        RunResult("/m/a.gguf", "a.gguf", "Q8_0", 145_000_000, is_reference=True, decode_tps=40.0),
        RunResult("/m/b.gguf", "b.gguf", "Q2_K", 88_000_000, decode_tps=61.5, mean_kl=0.3512,
                  top1_agreement=0.81),
        RunResult("/m/c.gguf", "c.gguf", "Q4_0", 90_000_000, error="it would not load"),
    )  # fmt: skip
    result = CompareResult("now", "hi", 4, 0, 512, 1, 100, "/m/a.gguf", runs)
    text = _text(
        "fit", lesson.Facts(INFO, memory_bytes=8 << 30, measured=lesson.Measured(compare=result))
    )
    assert "8.00 GiB free" in text
    assert "Q8_0 138.3 MiB 40.0 t/s (the reference)" in text
    assert "Q2_K 83.9 MiB 61.5 t/s, KLD 0.3512, top-1 81%" in text
    assert "Q4_0 failed" in text


def test_each_text_fits_the_strip_at_80_columns():
    """The strip is 76 columns inside its border at 80: each text keeps to 4 lines there."""
    runs = tuple(
        RunResult(f"/m/{q}.gguf", f"SmolLM2-135M-Instruct.{q}.gguf", q, 145_000_000,
                  is_reference=q == "Q8_0", decode_tps=140.0, mean_kl=0.0123,
                  top1_agreement=0.94)
        for q in ("Q8_0", "Q4_1", "Q2_K")
    )  # fmt: skip
    facts = lesson.Facts(
        INFO, _reply(), {"mem_read_gbps": 11.0}, 8 << 30,
        steering=Steering((HAPPY,), 5, 20), steered=Steering((HAPPY,), 5, 20),
        measured=lesson.Measured(
            _lens(), ("happy", _meter()),
            CompareResult("now", "hi", 4, 0, 512, 1, 100, "/m/Q8_0.gguf", runs),
        ),
    )  # fmt: skip
    for step in lesson.STEPS:
        for shown in (step.text(facts), step.text(lesson.Facts(INFO))):
            assert len(textwrap.wrap(shown, 76)) <= 4, (step.id, shown)


def test_a_reply_before_the_ceilings_asks_for_another():
    """The first reply of a fresh install can end before the tune on first use measured the
    ceilings: the gpu step says to send another message, not to send a first one."""
    reply = _reply()
    reply.limits = None
    text = lesson.STEPS[lesson.step_index("gpu")].text(
        lesson.Facts(INFO, reply, {"mem_read_gbps": 30.4})
    )
    assert "30 GB/s" in text and "send another message" in text
    assert "Send a message first" not in text
