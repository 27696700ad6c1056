"""The lesson's steps: their order, their texts written from the facts given, the place kept."""

from __future__ import annotations

import json

from helpers import run_cli

from chatapp.chat import lesson
from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import Finished, ModelInfo, PromptEvaluated
from chatapp.metrics import GenerationStats
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
