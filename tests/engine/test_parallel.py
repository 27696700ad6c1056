"""Several replies to one prompt decoded together (parallel sequences sharing the prompt's KV
cache), on the real model."""

from __future__ import annotations

import pytest

from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    PromptEvaluated,
    StopReason,
    Token,
)
from chatapp.sampling import SamplerSettings

STORY = (ChatMessage("user", "Write a short story about a fox."),)


def _run(engine, n: int, settings: SamplerSettings, **kw) -> list:
    return list(engine.generate(GenerateRequest(STORY, settings, n_alternatives=n, **kw)))


@pytest.mark.slow
def test_four_replies_in_one_batch_each_with_its_own_tokens(engine):
    events = _run(engine, 4, SamplerSettings(temperature=0.9, max_tokens=24), ignore_eos=True)
    end = events[-1]
    assert isinstance(end, Finished) and len(end.alternatives) == 4
    by_seq = {s: [t for t in events if isinstance(t, Token) and t.seq == s] for s in range(4)}
    for s, toks in by_seq.items():
        assert [t.index for t in toks] == list(range(24))
        assert "".join(t.text for t in toks) == end.alternatives[s]
        assert all(t.candidates for t in toks)
    assert len(set(end.alternatives)) > 1, "different seeds, different replies"
    assert end.alternative_reasons == ("max_tokens",) * 4
    assert end.stats.completion_tokens == 96 and end.text == end.alternatives[0]
    assert len([e for e in events if isinstance(e, PromptEvaluated)]) == 1  # one prefill


@pytest.mark.slow
def test_the_first_greedy_alternative_is_the_single_reply_and_the_cache_serves_the_next(engine):
    greedy = SamplerSettings(temperature=0.0, max_tokens=20)
    single = _run(engine, 1, greedy)[-1]
    batched = _run(engine, 3, greedy)[-1]
    assert batched.alternatives[0][:20] == single.text[:20]  # batched numerics may part later
    again = _run(engine, 1, greedy)
    reused = next(e for e in again if isinstance(e, PromptEvaluated)).n_reused
    assert reused > 0 and again[-1].reason in (StopReason.MAX_TOKENS, StopReason.EOG)


@pytest.mark.slow
def test_cancel_stops_every_alternative(engine):
    gen = engine.generate(
        GenerateRequest(STORY, SamplerSettings(max_tokens=400), n_alternatives=3, ignore_eos=True)
    )
    seen = 0
    for event in gen:
        if isinstance(event, Token):
            seen += 1
            if seen == 10:
                engine.cancel()
        if isinstance(event, Finished):
            end = event
    assert end.alternative_reasons == ("cancelled",) * 3 and seen < 1200
