"""Thinking models: reasoning and answer kept apart, while streaming and once finished."""

from __future__ import annotations

import dataclasses

import pytest
from scripted_engine import ScriptedEngine

from chatapp.chat.session import ChatSession
from chatapp.chat.thinking import ThinkingSplitter, opens_thinking, split_reply
from chatapp.engine.protocol import Finished, PromptEvaluated
from chatapp.sampling import SamplerSettings


def _stream(deltas: list[str], inside: bool = False) -> ThinkingSplitter:
    splitter = ThinkingSplitter(inside)
    for delta in deltas:
        splitter.feed(delta)
    return splitter


@pytest.mark.parametrize(
    "deltas",
    [
        ["<think>Let me see.</think>\nIt is 4."],
        ["<th", "ink>Let me", " see.</th", "ink>\n", "It is 4."],
        ["\n", "<", "think", ">", "Let me see.", "<", "/", "think", ">", "\nIt is 4."],
    ],
    ids=["whole", "markers-cut", "one-char-markers"],
)
def test_markers_cut_anywhere_across_batches(deltas):
    splitter = _stream(deltas)
    splitter.flush()
    assert (splitter.thinking, splitter.answer, splitter.closed) == (
        "Let me see.",
        "It is 4.",
        True,
    )


def test_while_streaming_the_reasoning_grows_and_a_half_marker_is_held_back():
    splitter = _stream(["<think>one two </thi"])
    assert splitter.in_thinking and splitter.thinking == "one two " and splitter.answer == ""
    splitter.feed("nk>answer")
    assert splitter.answer == "answer" and not splitter.in_thinking


def test_a_reply_without_reasoning_is_all_answer_even_with_think_later():
    split = split_reply("Sure. People write <think> tags in HTML-ish text.")
    assert split.thinking == "" and split.answer.startswith("Sure.") and not split.closed
    assert split_reply("<thin").answer == "<thin"  # a held-back start that never completed


def test_a_prompt_that_opened_the_reasoning_starts_the_reply_inside_it():
    assert opens_thinking("<|Assistant|><think>\n") and not opens_thinking(
        "<|im_start|>assistant\n"
    )
    split = split_reply("Hmm, 2+2.</think>\n\nFour.", inside=True)
    assert (split.thinking, split.answer) == ("Hmm, 2+2.", "Four.")
    unfinished = split_reply("still thinking when max_tokens hit", inside=True)
    assert unfinished.thinking.startswith("still") and unfinished.answer == ""
    assert not unfinished.closed


def _session(engine) -> ChatSession:
    session = ChatSession(settings=SamplerSettings(max_tokens=8))
    session.attach(engine, engine.start())
    return session


def test_the_session_keeps_the_answer_for_the_model_and_the_whole_reply_for_history():
    engine = ScriptedEngine(delay=0, words=["<think>", "plan", "</think>", "Hello", "there"])
    session = _session(engine)
    events = list(session.send("Hi"))
    finished = events[-1]
    assert isinstance(finished, Finished) and "<think>" in finished.text
    assert session.last_split.thinking.strip() == "plan"
    # 8 tokens: the script repeats its words, so a second "<think>" lands mid-answer: text
    assert session.conversation[-1].content == "Hello there <think> plan </think>"


class OpensThinking(ScriptedEngine):
    """A template whose generation prompt ends with <think> (as DeepSeek-R1 distills' does)."""

    def generate(self, request):
        for event in super().generate(request):
            if isinstance(event, PromptEvaluated):
                event = dataclasses.replace(event, rendered=event.rendered + "<think>\n")
            yield event


def test_when_the_prompt_opens_the_reasoning_the_session_starts_inside_it():
    engine = OpensThinking(delay=0, words=["weighing", "it", "</think>", "Yes", "."])
    session = _session(engine)
    session.add_user("Well?")
    for event in engine.generate(session.prepare().request):
        if isinstance(event, PromptEvaluated):
            session.prompt_evaluated(event)
            assert session.draft.split.in_thinking
        elif isinstance(event, Finished):
            split = session.finished(event)
        else:
            session.took([event])
    assert split.thinking.strip() == "weighing it" and split.closed
    assert session.conversation[-1].content.startswith("Yes")  # (the model sees the answer)


async def test_the_tui_streams_reasoning_into_a_block_that_folds_and_is_saved(tmp_path):
    from test_ui import SIZE, send, wait_until
    from textual.widgets import Collapsible, Static

    from chatapp.chat.recorder import ChatHistory
    from chatapp.history.store import Store
    from chatapp.ui.app import ChatApp

    words = ["<think>", "let", "me", "see", "</think>", "The", "answer", "is", "four", "."]
    engine = ScriptedEngine(delay=0.05, words=words)
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=len(words)))
    store = Store(tmp_path / "history.db")
    app.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "What is 2+2?")
        item = app.chat.items()[-1]
        await wait_until(pilot, lambda: item.query(Collapsible))
        block = item.query_one(Collapsible)
        assert not block.collapsed  # open while the model thinks
        await wait_until(pilot, lambda: app.reply is None)
        assert block.collapsed and block.title.startswith("Thinking · 5 tokens")
        assert "let me see" in str(block.query_one(".thinking-text", Static).content)
        assert item.text.strip() == "The answer is four ." and "<think>" not in item.text
        assert app.conversation[-1].content.strip() == "The answer is four ."
        saved = store.messages(app.history.conversation_id)[-1]
        assert saved.text.lstrip().startswith("<think>") and "four" in saved.text
        # a saved conversation shows its reasoning folded again
        await app.action_new_chat()
        await app.resume(saved.conversation_id)
        await pilot.pause(0.2)
        again = app.chat.items()[-1]
        assert again.query_one(Collapsible).collapsed and "<think>" not in again.text
