"""A second real model: gemma3 270M, a base model with no chat template and a 262k vocabulary."""

from __future__ import annotations

import pytest

from chatapp.chat.session import ChatSession
from chatapp.engine.protocol import Finished, Notice, Token
from chatapp.sampling import SamplerSettings

pytestmark = pytest.mark.slow


def test_it_loads_with_its_own_vocabulary_and_no_template(gemma):
    engine, info = gemma
    assert info.n_vocab == 262144 and not info.has_chat_template
    assert info.architecture == "gemma3" and info.quant == "Q4_K_M"


def test_a_chat_falls_back_to_the_plain_template_says_so_and_streams(gemma):
    engine, info = gemma
    session = ChatSession(settings=SamplerSettings(temperature=0.0, max_tokens=8))
    session.attach(engine, info)
    events = list(session.send("The capital of France is"))
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("no chat template" in n for n in notices)
    tokens = [e for e in events if isinstance(e, Token)]
    assert isinstance(events[-1], Finished) and 0 < len(tokens) <= 8
    assert all(t.candidates and t.candidates[0].p >= t.candidates[-1].p for t in tokens)
    assert session.conversation[-1].content == events[-1].text


def test_its_tokenizer_marks_its_own_special_tokens(gemma):
    engine, _ = gemma
    pieces = engine.tokenize("<start_of_turn>user\nhello", special=True)
    assert pieces[0].special and pieces[0].piece == b"<start_of_turn>"
    assert not any(p.special for p in pieces if p.text.strip() == "hello")
