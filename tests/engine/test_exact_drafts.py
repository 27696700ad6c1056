"""Drafting is exact: greedy and seeded replies with n-gram drafts and with a draft model are,
token for token, the replies decoded one token at a time (the penalty window, the grammar and
the random draws see only the tokens taken), compared step by step with the candidates."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.local.loop.token_loop import EXACT_NOTE
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
    Notice,
    PromptEvaluated,
    Token,
)
from chatapp.engine.schema_grammar import grammar_from_schema_text
from chatapp.sampling import SamplerSettings

# The Apache License 2.0 (as Debian ships it): its opening, rewritten, past 512 KV cells, where
# one-token decodes and batches took other attention kernels before (llama_open.exact_attention).
LICENCE = (Path(__file__).parents[1] / "data" / "apache-2.0.txt").read_text()[:2600]
REWRITE = (
    "Repeat the following text exactly, but write 'the recipient' instead of 'You' "
    "throughout.\n\n" + LICENCE
)
GREEDY = SamplerSettings(temperature=0.0)  # the app's repeat penalty (1.1 over 64 tokens)
NEAR_TIE = 0.02  # two candidates this close may swap under batched arithmetic
ARMS = ("ngram", "model")


@pytest.fixture(scope="module")
def engine(model_path: str):
    """The bundled model, drafting for itself as the draft model too (exact batches left
    open: a draft model loaded beside it makes them exact from the start)."""
    options = LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0, draft_model=model_path)
    with LocalEngine(options) as eng:
        yield eng


def reply(engine, request: GenerateRequest, draft: str) -> tuple[list[Token], Finished]:
    events = list(engine.generate(replace(request, draft=draft)))
    end = events[-1]
    assert isinstance(end, Finished), end
    return [e for e in events if isinstance(e, Token)], end


def as_compared(token: Token) -> list[tuple[bytes, float, float]]:
    """The step's best candidates as greedy compares them, best first: (piece, probability
    before the samplers, probability after the repeat penalty); under a grammar, those it
    allows (their rows: greedy takes the best of them)."""
    facts = getattr(token.candidates, "facts", None)
    if facts is None:
        return [(c.piece, c.p, c.p) for c in token.candidates if c.kept_grammar]
    ids = np.frombuffer(facts.ids, dtype=np.int32)
    raw = np.frombuffer(facts.logits, dtype=np.float32).astype(np.float64) - facts.log_z
    pen = raw.copy()
    hit = np.isin(ids, list(facts.penalized))
    rp = facts.settings.repeat_penalty
    logit = raw[hit] + facts.log_z
    pen[hit] = np.where(logit > 0, logit / rp, logit * rp) - facts.log_z
    rest = 1.0 - np.exp(raw[hit]).sum() + np.exp(pen[hit]).sum()  # the row's mass after it
    order = np.argsort(-pen, kind="stable")[:4]
    pieces = {c.id: c.piece for c in token.candidates}
    return [
        (pieces.get(int(ids[j]), b"?"), float(np.exp(raw[j])), float(np.exp(pen[j]) / rest))
        for j in order
    ]


def parted(plain: list[Token], drafted: list[Token], label: str) -> int | None:
    """Where the drafted reply first takes another token than the plain one (None: nowhere
    within both); fails unless the plain step's best two were within NEAR_TIE."""
    for i, (a, b) in enumerate(zip(plain, drafted, strict=False)):
        if a.id == b.id:
            continue
        best = as_compared(a)
        shown = lambda t: ", ".join(f"{p!r} {raw:.3f}/{pen:.3f}" for p, raw, pen in as_compared(t))  # noqa: E731
        assert best[0][2] - best[1][2] < NEAR_TIE, (
            f"{label}: step {i}: without drafts {a.piece!r}, with drafts {b.piece!r} "
            f"(drafted: {b.drafted}); candidates (p before / after the penalty) without "
            f"drafts: {shown(a)}; with drafts: {shown(b)}"
        )
        return i
    return None


def window(token: Token) -> frozenset[int]:
    """The ranked candidates the step's repeat penalty lowered (none under a grammar's rows)."""
    facts = getattr(token.candidates, "facts", None)
    return facts.penalized if facts is not None else frozenset()


def check_arms(engine, request: GenerateRequest, exact: bool = False) -> dict[str, list[Token]]:
    """The request without drafts, with n-gram drafts and with the draft model: the same
    tokens, or parted at a near tie (never, where `exact`); the same candidates with the same
    probabilities and penalty windows where the texts agree (batched rows are one-token
    decodes' bit for bit); drafts were taken and turned down."""
    plain, plain_end = reply(engine, request, "")
    ends = {}
    for arm in ARMS:
        tokens, end = reply(engine, request, arm)
        at = parted(plain, tokens, arm)
        assert at is None or not exact, f"{arm}: parted at step {at}"
        same = plain[:at] if at is not None else plain
        assert at is not None or len(tokens) == len(plain), arm
        for a, b in zip(same, tokens, strict=False):
            rows = lambda t: [(c.piece, round(c.p, 4)) for c in t.candidates]  # noqa: E731
            assert rows(a) == rows(b), f"{arm}: step {a.index}: {rows(a)} without drafts, {rows(b)}"
            assert window(a) == window(b), f"{arm}: step {a.index}: another penalty window"
        assert end.stats.draft == arm, (arm, end.stats)
        assert end.text == plain_end.text or at is not None, arm
        ends[arm] = tokens
    # (how much n-gram drafts draft follows the batch costs measured now: a draft model
    # drafts at once, to be judged)
    drafted = [t for tokens in ends.values() for t in tokens]
    assert any(t.drafted for t in ends["model"]), "the draft model drafted nothing"
    assert any(t.drafted for t in drafted) and any(t.rejected for t in drafted)
    return ends


@pytest.mark.slow
@pytest.mark.parametrize("penalty", [1.1, 1.0], ids=["app-penalty", "no-penalty"])
def test_greedy_replies_with_drafts_are_the_replies_without(engine, penalty):
    request = GenerateRequest(
        (ChatMessage("user", REWRITE),), GREEDY.with_(repeat_penalty=penalty, max_tokens=160)
    )
    check_arms(engine, request, exact=True)
    assert engine.info.exact_batches


@pytest.mark.slow
def test_a_reply_that_drafts_turns_exact_batches_on(model_path):
    """Loaded as the app loads it (no draft model, exact batches left open): the first reply
    with drafts makes the context anew with exact batches and says so once; from then on the
    greedy reply with n-gram drafts is the reply without, token for token."""
    request = GenerateRequest((ChatMessage("user", REWRITE),), GREEDY.with_(max_tokens=160))
    with LocalEngine(LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0)) as eng:
        assert not eng.info.exact_batches
        _, end = reply(eng, request, "")
        assert not end.stats.exact_batches
        events = list(eng.generate(replace(request, draft="ngram")))
        assert [e.message for e in events if isinstance(e, Notice)] == [EXACT_NOTE]
        drafted = [e for e in events if isinstance(e, Token)]
        assert events[-1].stats.exact_batches and eng.info.exact_batches
        plain, _ = reply(eng, request, "")
        assert [t.id for t in drafted] == [t.id for t in plain]
        assert any(t.drafted for t in drafted) and any(t.rejected for t in drafted)
        again = list(eng.generate(replace(request, draft="ngram")))
        assert not any(isinstance(e, Notice) for e in again)
        assert [t.id for t in again if isinstance(t, Token)] == [t.id for t in plain]


def test_the_prompt_reaches_past_512_cells(engine):
    """(Where an F16 cache's one-token flash attention splits the KV over the threads.)"""
    events = list(engine.generate(GenerateRequest((ChatMessage("user", REWRITE),), GREEDY)))
    prompt = next(e for e in events if isinstance(e, PromptEvaluated))
    assert len(prompt.tokens) > 512


@pytest.mark.slow
def test_seeded_replies_with_drafts_are_the_replies_without(engine):
    """A seeded reply draws one random number per token taken, drafted or not: the same
    reply, token for token."""
    warm = SamplerSettings(temperature=0.3, seed=5, max_tokens=120)
    check_arms(engine, GenerateRequest((ChatMessage("user", REWRITE),), warm), exact=True)


ORDER = {
    "type": "object",
    "properties": {
        "dish": {"type": "string", "maxLength": 30},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "notes": {"type": "string", "maxLength": 400},
    },
    "required": ["dish", "count", "notes"],
}


@pytest.mark.slow
def test_a_grammar_sees_only_the_tokens_taken(engine):
    """Under a grammar, drafts turned down never reach its state: the same reply as without
    drafts, and one that parses."""
    notes = (
        "no bread, extra basil, the soup very hot and the salad without onions or olives, "
        "delivered to the side door of the office on the third floor at noon, not earlier, "
        "and please ring the bell twice"
    )
    example = json.dumps({"dish": "tomato soup", "count": 2, "notes": notes}, separators=(",", ":"))
    request = GenerateRequest(
        (ChatMessage("user", f"Repeat this order exactly, as JSON: {example}"),),
        GREEDY.with_(max_tokens=120),
        grammar=grammar_from_schema_text(json.dumps(ORDER), "order schema"),
    )
    for tokens in check_arms(engine, request).values():
        text = b"".join(t.piece for t in tokens).decode()
        assert set(json.loads(text)) == set(ORDER["properties"])
