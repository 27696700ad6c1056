"""Thinking models: reasoning and answer kept apart, while streaming and once finished."""

from __future__ import annotations

import dataclasses

import pytest
from fakes.engines import ScriptedEngine
from helpers import pane

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
    from helpers import SIZE, send, wait_until
    from textual.widgets import Collapsible, Static

    from chatapp.chat.recorder import ChatHistory
    from chatapp.history.store import Store
    from chatapp.ui.app import ChatApp

    words = ["<think>", "let", "me", "see", "</think>", "The", "answer", "is", "four", "."]
    engine = ScriptedEngine(delay=0.25, words=words)  # (slow: the open block is seen)
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=len(words)))
    store = Store(tmp_path / "history.db")
    pane(app).session.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "What is 2+2?")
        item = pane(app).chat.items()[-1]
        await wait_until(pilot, lambda: item.query(Collapsible))
        block = item.query_one(Collapsible)
        assert not block.collapsed  # open while the model thinks
        await wait_until(pilot, lambda: pane(app).reply is None)
        assert block.collapsed and block.title.startswith("Thinking · 5 tokens")
        assert "let me see" in str(block.query_one(".thinking-text", Static).content)
        assert item.text.strip() == "The answer is four ." and "<think>" not in item.text
        assert pane(app).session.conversation[-1].content.strip() == "The answer is four ."
        saved = store.messages(pane(app).session.history.conversation_id)[-1]
        assert saved.text.lstrip().startswith("<think>") and "four" in saved.text
        # a saved conversation shows its reasoning folded again
        await app.chat_screen.action_pane("new_chat")
        await app.chat_screen.resume(saved.conversation_id)
        await pilot.pause(0.2)
        again = pane(app).chat.items()[-1]
        assert again.query_one(Collapsible).collapsed and "<think>" not in again.text


THINKING_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)


@pytest.mark.slow
def test_a_thinking_template_on_the_real_model_opens_or_skips_the_reasoning(model_path):
    from chatapp.engine.factory import make_engine
    from chatapp.engine.protocol import LoadOptions

    options = LoadOptions(
        model_path=model_path, n_ctx=512, n_gpu_layers=0, chat_template=THINKING_CHATML
    )
    engine = make_engine(options)
    try:
        session = ChatSession(settings=SamplerSettings(temperature=0.0, max_tokens=12))
        session.attach(engine, engine.start())
        events = list(session.send("What is 2+2?"))
        prompt = next(e for e in events if isinstance(e, PromptEvaluated))
        assert prompt.rendered.endswith("<|im_start|>assistant\n<think>\n")
        split = session.last_split
        reply = events[-1].text
        assert isinstance(events[-1], Finished) and reply
        if split.closed:  # the model closed its reasoning itself
            assert reply.startswith(split.thinking)
        else:  # 12 tokens of reasoning: all of it counts as thinking, no answer yet
            assert split.thinking == reply and split.answer == ""
        session.new_chat()
        session.enable_thinking = False
        events = list(session.send("What is 2+2?"))
        prompt = next(e for e in events if isinstance(e, PromptEvaluated))
        assert prompt.rendered.endswith("<think>\n\n</think>\n\n")
        assert session.last_split.thinking == ""
        assert session.conversation[-1].content == events[-1].text
    finally:
        engine.close()


async def test_ctrl_b_switches_thinking_for_the_next_request():
    from helpers import SIZE, send, wait_until

    from chatapp.ui.app import ChatApp

    engine = ScriptedEngine(delay=0)
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=2))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "one")
        await wait_until(pilot, lambda: pane(app).reply is None)
        assert engine.requests[-1].enable_thinking is None  # the template's own default
        await pilot.press("ctrl+b")
        assert "thinking off" in str(app.query_one("#status-line").content)
        await send(pilot, app, "two")
        await wait_until(pilot, lambda: pane(app).reply is None and len(engine.requests) == 2)
        assert engine.requests[-1].enable_thinking is False
        await pilot.press("ctrl+b")
        assert pane(app).session.enable_thinking is True


def test_the_think_key_in_config_is_read_and_written_back(tmp_path):
    from chatapp.config import load_config
    from chatapp.config_toml import to_toml

    path = tmp_path / "config.toml"
    path.write_text("think = false\n", encoding="utf-8")
    config, problems = load_config(path)
    assert problems == [] and config.think is False
    path.write_text(to_toml(config), encoding="utf-8")
    assert load_config(path)[0].think is False
    path.write_text('think = "maybe"\n', encoding="utf-8")
    config, problems = load_config(path)
    assert config.think is None and any("think" in p for p in problems)


def test_the_export_keeps_reasoning_and_answer_apart(tmp_path):
    from chatapp.commands.history import _markdown, export_data
    from chatapp.history.records import MessageStatus
    from chatapp.history.store import Store

    store = Store(tmp_path / "history.db")
    cid = store.create_conversation("sums")
    store.add_message(cid, "user", "2+2?")
    rid = store.begin_reply(cid)
    store.finish_reply(rid, "<think>two and two</think>\nFour.", MessageStatus.COMPLETE)
    conversation, messages = store.get_conversation(cid), store.messages(cid)
    md = _markdown(conversation, messages)
    assert "<details><summary>Thinking</summary>" in md and "two and two" in md
    assert md.rstrip().split("## Assistant")[1].count("Four.") == 1
    reply = export_data(conversation, messages)["messages"][-1]
    assert (reply["thinking"], reply["answer"]) == ("two and two", "Four.")
    assert reply["text"].startswith("<think>")  # the stored text stays whole
