"""The real engine on the bundled model: streaming, sampling, live settings, stops, cancel."""

from __future__ import annotations

import math
import os
import time

import pytest

from chatapp.engine.protocol import (
    ChatMessage,
    Failed,
    Finished,
    GenerateRequest,
    PromptEvaluated,
    SettingsApplied,
    StopReason,
    Token,
)
from chatapp.sampling import SamplerSettings

pytestmark = pytest.mark.slow  # every test here runs the real model

GREEDY = SamplerSettings(temperature=0.0, max_tokens=24)


def ask(text: str) -> tuple[ChatMessage, ...]:
    return (ChatMessage("user", text),)


def run(engine, request: GenerateRequest, on_token=None):
    events = []
    for event in engine.generate(request):
        events.append(event)
        if on_token and isinstance(event, Token):
            on_token(event)
    tokens = [e for e in events if isinstance(e, Token)]
    end = events[-1]
    return events, tokens, end


def test_reply_streams_tokens_then_finishes(engine):
    events, tokens, end = run(engine, GenerateRequest(ask("Say hello."), GREEDY))
    assert isinstance(events[0], PromptEvaluated)
    assert events[0].tokens and "<|im_start|>" in events[0].rendered
    assert isinstance(end, Finished)
    assert tokens, "no tokens streamed"
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert end.text == "".join(t.text for t in tokens)
    assert end.stats.completion_tokens == len(tokens)
    assert end.stats.ttft_s is not None and end.stats.ttft_s > 0
    assert end.reason in (StopReason.EOG, StopReason.MAX_TOKENS)


def test_the_loaded_model_names_its_quant_from_the_header(engine):
    # gguf_header.quant_name, as `chatapp inspect` and the history do (not llama.cpp's
    # description, whose last word is "Medium" for a Q4_K_M file).
    assert engine.info.quant == "Q4_1"
    assert engine.info.n_layers == 30 and engine.info.n_gpu_layers == 0


def test_greedy_is_deterministic(engine):
    req = GenerateRequest(ask("Name three colours."), GREEDY)
    _, a, _ = run(engine, req)
    _, b, _ = run(engine, req)
    assert [t.id for t in a] == [t.id for t in b]


def test_seed_reproduces_and_differs(engine):
    def ids(seed: int) -> list[int]:
        s = SamplerSettings(
            temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed, max_tokens=24
        )
        return [t.id for t in run(engine, GenerateRequest(ask("Tell a story."), s))[1]]

    first = ids(7)
    assert first == ids(7)
    assert first != ids(8)


def test_temperature_change_mid_reply_applies_from_next_token(engine):
    hot = SamplerSettings(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=3, max_tokens=40)
    cold = hot.with_(temperature=0.0)
    sent = []

    def on_token(tok: Token) -> None:
        if tok.index == 4 and not sent:
            engine.update_settings(cold)
            sent.append(tok.index)

    events, tokens, end = run(engine, GenerateRequest(ask("Write a poem."), hot), on_token)
    applied = [e for e in events if isinstance(e, SettingsApplied)]
    assert len(applied) == 1 and applied[0].settings == cold
    j = applied[0].index
    assert 5 <= j < len(tokens), "the change must take effect on a token after the one seen"
    ids = [t.id for t in tokens]
    # The rest must equal a greedy continuation of the same reply from token j.
    cont = GenerateRequest(
        ask("Write a poem."), cold.with_(max_tokens=40 - j), reply_prefix_ids=tuple(ids[:j])
    )
    _, rest, _ = run(engine, cont)
    assert [t.id for t in rest] == ids[j:]
    assert [t.index for t in rest][:1] == [j]


def test_candidates_are_probabilities_and_include_the_choice(engine):
    s = SamplerSettings(
        temperature=0.9, top_k=5, top_p=1.0, min_p=0.0, seed=1, max_tokens=12, repeat_penalty=1.0
    )  # penalties would reorder candidates
    _, tokens, _ = run(engine, GenerateRequest(ask("What is rain?"), s, top_n=10))
    for tok in tokens:
        cands = tok.candidates
        assert len(cands) == 10
        assert sum(c.p for c in cands) <= 1.0 + 1e-6
        assert all(0 <= c.p <= 1 for c in cands)
        assert [c.p for c in cands] == sorted((c.p for c in cands), reverse=True)
        kept = [c for c in cands if c.kept]
        assert len(kept) <= 5
        assert math.isclose(sum(c.p_final for c in kept), 1.0, rel_tol=1e-4)
        assert tok.id in {c.id for c in kept}
        assert tok.logprob is not None and tok.logprob <= 0


def test_top_p_and_min_p_cut_lines(engine):
    # No penalty and top-k off: each cut then depends on the raw probabilities alone.
    s = SamplerSettings(
        temperature=1.0, top_k=0, top_p=0.5, min_p=0.2, seed=1, max_tokens=6, repeat_penalty=1.0
    )
    _, tokens, _ = run(engine, GenerateRequest(ask("Hello!"), s, top_n=10))
    cut_by_min_p = cut_by_top_p = 0
    for tok in tokens:
        c = tok.candidates
        top, before = c[0].p, 0.0
        for cand in c:
            floor = 0.2 * top  # min-p keeps what is at least min_p times the best
            # top-p (first in the chain) keeps up to the first reaching the mass; min-p then
            # cuts what top-p kept below its floor
            if abs(before - 0.5) > 1e-5 and abs(cand.p - floor) > 1e-5 * top:
                want = "top_p" if before >= 0.5 else "min_p" if cand.p < floor else ""
                assert cand.cut_by == want, (cand, before, floor)
            before += cand.p
            cut_by_min_p += cand.cut_by == "min_p"
            cut_by_top_p += cand.cut_by == "top_p"
        assert c[0].kept
        assert all(x.p_final == 0 for x in c if not x.kept)
    assert cut_by_min_p and cut_by_top_p, "each cut must show up for the check to mean something"


def test_max_tokens_stops_with_reason(engine):
    s = SamplerSettings(temperature=0.0, max_tokens=5)
    req = GenerateRequest(ask("Count to one hundred."), s, ignore_eos=True)
    _, tokens, end = run(engine, req)
    assert end.reason is StopReason.MAX_TOKENS
    assert len(tokens) == 5


def test_stop_string_stops_and_is_removed(engine):
    req = GenerateRequest(ask("List five fruits, one per line."), GREEDY.with_(max_tokens=40))
    _, tokens, end = run(engine, req)
    full = end.text
    stop = next(t.text.strip() for t in tokens[3:] if len(t.text.strip()) >= 2)
    _, _, end2 = run(engine, GenerateRequest(req.messages, req.settings, stop=(stop,)))
    assert end2.reason is StopReason.STOP_STRING
    assert end2.detail == stop
    assert end2.text == full[: full.find(stop)]


def test_cancel_stops_within_a_token(engine):
    req = GenerateRequest(
        ask("Write a long essay."), SamplerSettings(max_tokens=400), ignore_eos=True
    )
    seen = []
    cancelled_at = []

    def on_token(tok: Token) -> None:
        seen.append(tok)
        if len(seen) == 3:
            cancelled_at.append(time.perf_counter())
            engine.cancel()

    _, tokens, end = run(engine, req, on_token)
    assert end.reason is StopReason.CANCELLED
    # Tokens sampled before the cancel, still in the worker's batch of events (one every 50 ms),
    # arrive after it; after the cancel the worker samples at most the token it was decoding
    # (Token.t is the worker's perf_counter, the same monotonic clock in both processes).
    after = [t for t in tokens if t.t > cancelled_at[0]]
    assert len(after) <= 1, [round(t.t - cancelled_at[0], 4) for t in after]
    assert len(tokens) < 100


def test_multibyte_character_split_across_tokens_decodes_once(engine):
    pieces = engine.tokenize("🦙", special=False)
    assert len(pieces) > 1, "the emoji should be split into byte tokens"
    prefix = tuple(p.id for p in engine.tokenize("Llama: 🦙🦙", special=False))
    req = GenerateRequest(
        ask("Repeat: 🦙🦙🦙"), GREEDY.with_(max_tokens=1), reply_prefix_ids=prefix
    )
    _, _, end = run(engine, req)
    assert end.text.startswith("Llama: 🦙🦙")
    assert end.text.count("🦙") >= 2
    assert "\ufffd" not in end.text


def test_streamed_deltas_never_split_a_character(engine):
    s = SamplerSettings(temperature=0.0, max_tokens=30)
    _, tokens, end = run(engine, GenerateRequest(ask("Reply with three emoji only: 🦙🍎🚀"), s))
    assert "\ufffd" not in end.text
    assert "".join(t.text for t in tokens) == end.text
    joined = b"".join(t.piece for t in tokens).decode("utf-8")
    assert joined == end.text
    for t in tokens:
        if t.text == "":
            assert t.piece, "an empty delta must be a partial UTF-8 character"


def test_second_turn_reuses_the_kv_cache(engine):
    first = ask("My name is Ada.")
    events, _, end = run(engine, GenerateRequest(first, GREEDY))
    turn2 = (*first, ChatMessage("assistant", end.text), ChatMessage("user", "What is my name?"))
    events2, _, _ = run(engine, GenerateRequest(turn2, GREEDY))
    pe = events2[0]
    assert isinstance(pe, PromptEvaluated)
    assert pe.n_reused > 10
    assert pe.n_new + pe.n_reused == len(pe.tokens)


def test_tokenize_any_text(engine):
    pieces = engine.tokenize("It works on any sentence you type.")
    assert len(pieces) > 3
    assert b"".join(p.piece for p in pieces) == b"It works on any sentence you type."
    specials = engine.tokenize("<|im_start|>user")
    assert specials[0].piece == b"<|im_start|>"


def test_special_tokens_come_from_llama_cpp_not_their_shape(engine):
    """The chat template's markers are special (llama.cpp's token attributes say so); an
    ordinary word, and text that only looks like markup, are not."""
    pieces = engine.tokenize("<|im_start|>user\nhello <br> [INST]<|im_end|>")
    by_piece = {p.piece: p.special for p in pieces}
    assert by_piece[b"<|im_start|>"] is True
    assert by_piece[b"<|im_end|>"] is True
    assert by_piece[b"hello"] is False
    assert [p.piece for p in pieces if p.special] == [b"<|im_start|>", b"<|im_end|>"]
    # the prompt the worker reports carries the same flags
    events, _, _ = run(engine, GenerateRequest(ask("hello"), GREEDY.with_(max_tokens=1)))
    pe = events[0]
    assert isinstance(pe, PromptEvaluated)
    marks = {p.piece for p in pe.tokens if p.special}
    assert marks == {b"<|im_start|>", b"<|im_end|>"}
    assert any(p.text.strip() == "hello" and not p.special for p in pe.tokens)


@pytest.fixture(scope="module")
def small_engine(model_path):
    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.engine.protocol import LoadOptions

    eng = LocalEngine(LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=0, n_batch=256))
    eng.start()
    yield eng
    eng.close()


def test_prompt_longer_than_context_is_a_clear_error(small_engine):
    req = GenerateRequest(ask("word " * 400), GREEDY)
    _, _, end = run(small_engine, req)
    assert isinstance(end, Failed)
    assert "context holds 256" in end.message


def test_reply_that_fills_the_context_stops_with_reason(small_engine):
    req = GenerateRequest(
        ask("Hi"), SamplerSettings(temperature=0.0, max_tokens=500), ignore_eos=True
    )
    _, tokens, end = run(small_engine, req)
    assert end.reason is StopReason.CONTEXT_FULL
    assert end.stats.n_past == 256
    # and the engine is still usable afterwards
    _, tokens2, end2 = run(small_engine, GenerateRequest(ask("Hi"), GREEDY.with_(max_tokens=3)))
    assert isinstance(end2, Finished) and tokens2


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice is Linux's")
def test_a_worker_started_nicer_runs_below_our_priority_threads_included(model_path):
    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.engine.protocol import LoadOptions

    ours = os.getpriority(os.PRIO_PROCESS, 0)
    with LocalEngine(LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=0), nice=5) as eng:
        _, tokens, _ = run(eng, GenerateRequest(ask("Hi"), GREEDY.with_(max_tokens=4)))
        assert tokens
        pid = eng._proc.pid
        threads = os.listdir(f"/proc/{pid}/task")
        nices = {os.getpriority(os.PRIO_PROCESS, int(t)) for t in threads}  # per thread on Linux
        assert len(threads) > 1  # llama.cpp's threads ran, and inherited the priority
        assert nices == {min(19, ours + 5)}
