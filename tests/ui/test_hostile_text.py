"""Any text shows as text: hostile strings (markup, escape and OSC sequences, NUL, RTL marks,
wide and combining characters, 100k characters) through every place of the TUI that shows
runtime text, with Pilot: the app stays up and each place shows the text literally (control
characters as visible symbols)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from fakes.engines import ScriptedEngine
from helpers import SIZE, Host, pane, text_of, wait_until
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static, TabbedContent
from textual.widgets._toast import Toast

from chatapp.chat.recorder import ChatHistory
from chatapp.engine.schema_grammar import GrammarError, load_grammar
from chatapp.history.store import Store
from chatapp.models.compare_result import RunResult
from chatapp.models.discovery import ModelEntry
from chatapp.models.hub.picker import QuantRow
from chatapp.models.hub.repo_files import Listing
from chatapp.models.hub.search import Found
from chatapp.sampling import SamplerSettings
from chatapp.textsafe import printable, token_display
from chatapp.ui.app import ChatApp
from chatapp.ui.launch import versus_app
from chatapp.ui.screens.conversations import ConfirmScreen, ConversationsScreen
from chatapp.ui.screens.grammar import NUL_IN_PATH, GrammarScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.screens.versus import VersusScreen
from chatapp.ui.widgets.chat import SHOWN_CHARS
from chatapp.ui.widgets.compare_view import CompareTable, RepliesView, file_label
from chatapp.ui.widgets.get_models import GetModelsView
from chatapp.ui.widgets.get_models_rows import Ranked
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.model_card import CardView

FRAGMENTS = [
    "[/", "[/]", "[bold]", "[/bold]", "[i]", "arr[i]", "[link=x]", "[@click=app.quit]",
    "[$accent]", "$name", "\\", "[", "]", "\x1b]0;title\x07", "\x1b]52;c;aGk=\x07", "\x1b[2J",
    "\x1b", "\x9b2J", "\x00", "\x07", "\r", "\r\n", "\n", "\t", "\u202e", "\u200f", "\u2066",
    "界", "ｗｉｄｅ", "e\u0301", "\U0001f469\u200d\U0001f469\u200d\U0001f467", "\ufeff",
]  # fmt: skip
HOSTILE = (
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), min_size=1, max_size=8)
    .map("".join)
    .filter(bool)
)
HUGE = "[/]" + "界[bold]\x1b]0;t\x07" * 10_000  # 100k characters, markup and escapes all along
RUNS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def shown(widget) -> str:
    return text_of(widget)


def no_raw_escapes(app) -> None:
    """The screen as the terminal would get it holds no ESC, BEL or C1 from the text."""
    strips = app.screen._compositor.render_full_update().strips
    text = "".join(seg.text for strip in strips for seg in strip)
    assert not any(c in text for c in "\x1b\x07\x00\x9b"), "a raw control reached the screen"


# ---- the chat app: message, reply, status, notices, reasoning, picked, Inside, History -----


async def chat_places(pilot, app: ChatApp, text: str, store: Store) -> None:
    await wait_until(pilot, lambda: app.slot.engine is not None)
    prompt = app.query_one("#prompt")
    prompt.text = f"say {text}"
    typed = prompt.text
    prompt.focus()
    await pilot.press("enter")
    await wait_until(pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None)
    user, reply = pane(app).chat.items()[-2:]
    assert user.text == typed and reply.text.startswith(" " + text[:100])
    no_raw_escapes(app)

    app.set_status(text)  # the status line (/file errors, picked '…', model names)
    assert shown(app.query_one("#status-line")) == printable(text)

    app.notify(text, title=text)
    await wait_until(pilot, lambda: app.screen.query(Toast))
    assert printable(text) in str(app.screen.query(Toast).last().render())
    app.clear_notifications()

    item = await pane(app).chat.add("assistant", f"<think>{text}</think>the answer")
    await pilot.pause()
    if item.thinking:
        reasoning = item.query_one(".thinking-text", Static)
        assert shown(reasoning) == printable(item.thinking[-SHOWN_CHARS:])

    probs = app.chat_screen.view.probs  # picked '…': a candidate whose text is the hostile string
    probs.focus()
    await pilot.pause()
    await pilot.press("down", "enter")
    await wait_until(pilot, lambda: len(app.slot.engine.requests) == 2 and pane(app).reply is None)

    app.query_one(TabbedContent).active = "tab-tokens"
    app.chat_screen.view.token_panel.strip.cursor = 0
    app.query_one(TabbedContent).active = "tab-inside"
    panel = app.query_one(InsidePanel)
    await wait_until(pilot, lambda: panel.inspection is not None)
    piece = token_display(app.chat_screen.view.token_panel.reply_tokens[0].piece)
    assert repr(piece) in panel.status
    assert shown(panel.query_one("#inside-status")) == printable(panel.status)
    no_raw_escapes(app)

    cid = store.create_conversation(text)
    store.add_message(cid, "user", text)
    title = store.get_conversation(cid).title
    app.chat_screen.action_conversations()
    await wait_until(pilot, lambda: isinstance(app.screen, ConversationsScreen))
    screen = app.screen
    await wait_until(pilot, lambda: cid in screen.ids)
    row = screen.ids.index(cid)
    assert str(screen.query_one(DataTable).get_row_at(row)[1]) == printable(title)
    await pilot.pause()
    screen.query_one(DataTable).move_cursor(row=row)
    await pilot.press("delete")
    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    question = shown(app.screen.query_one(Label))
    assert question == printable(f"Delete “{title}” and all its messages?")
    await pilot.press("n", "escape")
    await wait_until(pilot, lambda: len(app.screen_stack) == 1)

    app.push_screen(GrammarScreen(None, path=text))
    await wait_until(pilot, lambda: app.screen.query("#grammar-error"))
    await pilot.press("enter")
    await pilot.pause()
    if isinstance(app.screen, GrammarScreen):  # (a path that is a real file would be used)
        expected = "give the path of a file"
        if "\0" in text:
            expected = NUL_IN_PATH
        elif text.strip():
            try:
                load_grammar(text.strip())
            except GrammarError as exc:
                expected = str(exc)
        assert shown(app.screen.query_one("#grammar-error")) == printable(expected)
        await pilot.press("escape")

    screen = SystemPromptScreen(text)
    app.push_screen(screen)
    await wait_until(pilot, lambda: app.screen is screen and screen.query("#prompt-names"))
    await pilot.pause()
    screen.note(text)
    assert shown(screen.query_one("#prompt-note")) == printable(text)
    await pilot.press("escape")

    with tempfile.TemporaryDirectory() as folder:  # the attachment box's border title
        name = re.sub(r"[\s/\x00]", "_", text).encode()[:200].decode(errors="ignore")
        path = Path(folder) / f"{name or 'x'}.txt"
        path.write_text("attached")
        prompt = app.query_one("#prompt")
        prompt.text = f"/file {path}"
        prompt.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert printable(path.name) in prompt._border_title.plain
    no_raw_escapes(app)


@RUNS
@given(text=HOSTILE)
@example(text=HUGE)
async def test_hostile_text_in_the_chat(text):
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "history.db")
        engine = ScriptedEngine(delay=0, words=[text])
        app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=4))
        pane(app).session.history = ChatHistory(store, app._warn)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await chat_places(pilot, app, text, store)
            assert app.is_running
        store.close()


# ---- views shown beside the chat: Hub names (F8), model card, compare, past runs ---------


async def widget_places(pilot, app: Host, text: str) -> None:
    screen = app.screen
    hub = GetModelsView(machine=lambda: (None, 8 << 30))
    card, table, replies = CardView(), CompareTable(), RepliesView()
    await screen.mount_all([hub, card, table, replies])
    hub.found = (Found(text, 5, 1, text),)
    row = QuantRow(text, text, 1 << 30, 4.5, 2 << 30, True, "RAM", 20.0, False, True)
    hub.ranked = Ranked(Listing(text, "0" * 40, ()), (row,), None, 8 << 30)
    await pilot.pause()
    repos, files = hub.query(DataTable)
    assert [str(c) for c in repos.get_row_at(0)][::3] == [printable(text)] * 2
    assert str(files.get_row_at(0)[-1]) == str(files.get_row_at(0)[1]) == printable(text)
    assert printable(text) in shown(hub.query_one("#hub-reason"))

    card.error = text
    await pilot.pause()
    assert shown(card) == printable(f"✗ {text}")

    entry = ModelEntry(f"/m/{text}.gguf", "folder", 1 << 20, quant=text)
    assert printable(text) in file_label(entry).plain
    assert printable(text) in file_label(ModelEntry("/m/x", "folder", 0, error=text)).plain
    ok = RunResult(f"/m/{text}", text, "Q4_0", 1 << 20, text=text)
    failed = RunResult("/m/bad", f"bad{text}", "Q8_0", 1 << 20, error=text)
    table.queue([ok.path])
    await replies.show([ok, failed])
    await pilot.pause()
    texts = [shown(s) for s in replies.query(Static)]
    assert printable(text) in texts and printable(f"✗ {text}") in texts
    no_raw_escapes(app)


@RUNS
@given(text=HOSTILE)
@example(text=HUGE)
async def test_hostile_text_in_hub_names_model_cards_and_comparisons(text):
    app = Host(Screen())
    async with app.run_test(size=SIZE) as pilot:
        await widget_places(pilot, app, text)
        assert app.is_running


# ---- side by side (--vs): the files' labels, the prompt, the replies ------------------------


@settings(RUNS, max_examples=8)
@given(text=HOSTILE)
async def test_hostile_text_side_by_side(text):
    engines = ScriptedEngine(delay=0, words=[text]), ScriptedEngine(delay=0, words=[text])
    app = versus_app((lambda: engines[0], lambda: engines[1]), (text, text))
    async with app.run_test(size=(160, 44)) as pilot:
        screen = app.screen
        assert isinstance(screen, VersusScreen)
        await wait_until(pilot, lambda: all(s.engine is not None for s in screen.slots.values()))
        box = app.query_one("#vs-prompt")
        box.text = f"say {text}"
        typed = box.text
        box.focus()
        await pilot.press("enter")
        column = screen.columns["a"]
        await wait_until(pilot, lambda: column.finished is not None and not screen.busy)
        assert shown(column.query_one(".title")) == printable(f"A: {text}")
        user, reply = column.pane.chat.items()
        assert user.text == typed.strip()
        assert printable(text.strip()) in printable(reply.text)
        screen.status(text)
        assert shown(app.query_one("#vs-status")) == printable(text)
        no_raw_escapes(app)
        assert app.is_running
