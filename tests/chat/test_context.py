"""Context trimming: keep the system prompt and the newest turns, drop the oldest pairs."""

from __future__ import annotations

import math

import pytest

from chatapp.chat.context import fit_messages, left_out_note, turns
from chatapp.chat.session import ChatSession
from chatapp.engine.protocol import ChatMessage
from chatapp.sampling import SamplerSettings

pytestmark = pytest.mark.usefixtures("fresh_dirs")


class Counter:
    """A fake template + tokenizer: 4 tokens of framing per message plus one per word."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[ChatMessage]) -> int:
        self.calls += 1
        return 2 + sum(4 + len(m.content.split()) for m in messages)


def _chat(n_pairs: int, words: int = 10) -> list[ChatMessage]:
    out = [ChatMessage("system", "be brief")]
    for i in range(n_pairs):
        out.append(ChatMessage("user", f"q{i} " + "w " * words))
        out.append(ChatMessage("assistant", f"a{i} " + "w " * words))
    return out


def test_everything_fits() -> None:
    chat, count = _chat(3), Counter()
    assert fit_messages(chat, count, n_ctx=4096, reply_budget=512) == (chat, 0)
    assert count.calls == 1


def test_oldest_pairs_are_dropped_system_and_newest_kept() -> None:
    chat = _chat(20) + [ChatMessage("user", "newest question")]
    count = Counter()
    total = count(chat)
    kept, dropped = fit_messages(chat, count, n_ctx=total // 2 + 100, reply_budget=100)
    assert kept[0] == chat[0]  # the system prompt
    assert kept[-1] == chat[-1]  # the newest turn
    assert kept == [chat[0], *chat[len(chat) - len(kept) + 1 :]]  # a contiguous newest tail
    assert kept[1].role == "user"  # whole pairs: the tail starts at a user turn
    assert dropped == len(chat) - len(kept) and dropped % 2 == 0
    assert count(kept) <= total // 2
    # the cut is as late as possible: one more pair would not fit
    one_more = [chat[0], *chat[len(chat) - len(kept) - 1 :]]
    assert count(one_more) > total // 2


def test_counts_are_logarithmic() -> None:
    chat = _chat(500)
    count = Counter()
    total = Counter()(chat)
    fit_messages(chat, count, n_ctx=total // 3, reply_budget=0)
    assert count.calls <= 1 + math.ceil(math.log2(500))


def test_nothing_fits_keeps_system_and_newest_turn() -> None:
    chat = _chat(5)
    kept, dropped = fit_messages(chat, Counter(), n_ctx=10, reply_budget=5)
    assert kept == [chat[0], chat[-2], chat[-1]]  # the newest user + assistant turn
    assert dropped == 8


def test_no_system_prompt_and_a_leading_assistant_greeting() -> None:
    chat = [
        ChatMessage("assistant", "hello " * 50),
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "yes"),
        ChatMessage("user", "new"),
    ]
    kept, dropped = fit_messages(chat, Counter(), n_ctx=40, reply_budget=10)
    assert kept == chat[1:] and dropped == 1
    assert turns(chat) == ([], [[chat[0]], chat[1:3], [chat[3]]])


def test_single_turn_is_never_counted_or_cut() -> None:
    count = Counter()
    chat = [ChatMessage("system", "s"), ChatMessage("user", "long " * 1000)]
    assert fit_messages(chat, count, n_ctx=10, reply_budget=5) == (chat, 0)
    assert count.calls == 0


def test_a_counter_that_cannot_tell_leaves_nothing_out() -> None:
    calls: list[int] = []

    def cannot_tell(messages: list[ChatMessage]) -> None:
        calls.append(len(messages))
        return None

    many = [ChatMessage("user" if i % 2 == 0 else "assistant", "x" * 500) for i in range(8)]
    assert fit_messages(many, cannot_tell, n_ctx=100, reply_budget=10) == (many, 0)
    assert calls == [8]  # asked once, for the whole conversation


def test_the_left_out_note_counts_messages_and_the_context() -> None:
    assert left_out_note(0, 2048) == ""
    assert (
        left_out_note(1, 2048)
        == "the model no longer sees the first message (context 2,048 tokens)"
    )
    assert (
        left_out_note(4, 512)
        == "the model no longer sees the first 4 messages (context 512 tokens)"
    )


def _real_session(engine, system_prompt: str = "") -> ChatSession:
    session = ChatSession(settings=SamplerSettings(max_tokens=256), system_prompt=system_prompt)
    session.attach(engine, engine.info)
    return session


def test_a_message_too_long_alone_is_one_sentence_with_real_counts(engine) -> None:
    session = _real_session(engine, "You are terse.")
    assert session.too_long("What is two plus two?") == ""
    text = "the tide is full tonight " * 500
    tokens = engine.count_tokens(
        [ChatMessage("system", "You are terse."), ChatMessage("user", text)]
    )
    assert tokens > 2048 - 256
    assert session.too_long(text) == (
        f"the message with the system prompt is {tokens:,} tokens and the reply needs 256, but "
        "the context holds 2,048; shorten it, or load the model with a larger --ctx"
    )
    assert session.conversation == [], "nothing was added"


def test_a_long_conversation_says_once_which_messages_are_left_out(engine) -> None:
    session = _real_session(engine)
    turn = "tell me about the weather in the mountains " * 20
    session.conversation = [ChatMessage(r, turn) for _ in range(8) for r in ("user", "assistant")]
    session.add_user("And by the sea?")
    first = session.prepare()
    assert first.dropped > 0 and first.dropped % 2 == 0
    assert first.note == left_out_note(first.dropped, 2048)
    tokens = engine.count_tokens(list(first.request.messages))
    assert tokens <= 2048 - 256, "what is left fits with room for the reply"
    session.draft = None
    again = session.prepare()
    assert again.dropped == first.dropped and again.note == "", "said once"
    session.draft = None
    session.new_chat()
    session.add_user("Hello")
    fresh = session.prepare()
    assert fresh.dropped == 0 and fresh.note == ""
