"""The TUI with speculative decoding on the real model: drafted tokens marked in the Tokens tab,
rejected drafts on demand, the Speed panel's note, the drafts toggle."""

from __future__ import annotations

import pytest
from helpers import SIZE, pane, send, wait_until

from chatapp.chat.recorder import ChatHistory
from chatapp.config import Config
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.history.store import Store
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.stats import run_settings
from chatapp.ui.widgets.tokens import TokenStrip

REWRITE = (
    "Repeat this sentence exactly: The keeper climbed the hundred and twelve steps to the "
    "lantern room every morning and cleaned the great lens with a soft cloth."
)


@pytest.mark.slow
async def test_drafted_tokens_are_marked_and_the_speed_panel_reports_them(model_path, fresh_dirs):
    options = LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options), config=Config(draft="ngram"))
    settings = pane(app).session.settings.with_(temperature=0.0)
    app.chat_screen.initial_settings = pane(app).session.settings = settings
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, REWRITE)
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        reply = pane(app).last_reply
        drafted = [t for t in reply.tokens if t.drafted]
        assert drafted, "the rewrite drafts most of its tokens from the prompt"
        strip = app.query_one("#reply-tokens", TokenStrip)
        assert sum(t.drafted for t in strip.tokens) == len(drafted)
        marked = strip.get_component_rich_style("tokenstrip--draft")
        rendered = strip.render()
        i = next(i for i, t in enumerate(strip.tokens) if t.drafted)
        a, _ = strip._spans[i]
        assert any(s.start <= a < s.end and s.style.underline for s in rendered.spans)
        assert marked.underline
        notes = app.chat_screen.view.stats_panel.notes
        assert notes.startswith("why: ") and "ngram drafts" in notes
        assert "no plain reply on this model yet" in notes
        # The reply with drafts turned exact batches on: the panel's run line says so.
        panel = app.chat_screen.view.stats_panel
        assert panel.info.exact_batches and pane(app).session.info.exact_batches
        assert "fa on exact" in run_settings(panel.info)
        # In the reply too, on demand: its text with the drafted tokens marked.
        await pilot.press("alt+m")
        shown = reply.item.marked
        assert shown is not None and sum(d for _, d in shown) == len(drafted)
        assert "".join(t for t, _ in shown) == "".join(t.text for t in reply.tokens)
        await pilot.press("alt+m")
        assert reply.item.marked is None
        # Rejected drafts, on demand.
        if any(t.rejected for t in strip.tokens):
            assert "⟨" not in strip.render().plain
            strip.focus()
            await pilot.press("d")
            assert strip.show_rejected and "⟨" in strip.render().plain
        # The toggle: off for the next reply, whose speed becomes the comparison.
        await pilot.press("alt+d")
        assert pane(app).session.speculation == ""
        await send(pilot, app, REWRITE)
        await wait_until(
            pilot, lambda: pane(app).reply is None and len(pane(app).session.conversation) == 4, 60
        )
        assert "drafts" not in app.chat_screen.view.stats_panel.notes
        await pilot.press("alt+d")
        assert pane(app).session.speculation == "ngram"
        await send(pilot, app, REWRITE)
        await wait_until(
            pilot, lambda: pane(app).reply is None and len(pane(app).session.conversation) == 6, 60
        )
        assert "x the last plain reply (" in app.chat_screen.view.stats_panel.notes


@pytest.mark.slow
async def test_regenerate_x4_decodes_four_replies_together_as_branches(model_path, fresh_dirs):
    options = LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0)
    app = ChatApp(lambda: LocalEngine(options))
    store = Store(fresh_dirs / "history.db")
    pane(app).session.history = ChatHistory(store, app._warn)
    settings = pane(app).session.settings.with_(max_tokens=24)
    app.chat_screen.initial_settings = pane(app).session.settings = settings
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Tell me about foxes.")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        await pilot.press("alt+r")
        await wait_until(pilot, lambda: pane(app).reply is not None, 10)
        await wait_until(pilot, lambda: pane(app).reply is None, 60)
        tree = pane(app).session.tree
        last = tree.path()[-1]
        siblings = last.parent.children
        assert len(siblings) == 5, "the first reply and the four made together"
        assert siblings.index(last) == 1, "the batch's first reply is the one shown"
        made = siblings[1:]
        assert all(t.row is not None and t.text for t in made)
        assert all(t.tokens and {x.seq for x in t.tokens} == {i} for i, t in enumerate(made))
        assert "4 replies in one batch" in app.chat_screen.view.stats_panel.notes
        (conversation,) = store.list_conversations()
        stored = store.all_messages(conversation.id)
        assert sum(m.role == "assistant" for m in stored) == 5
        assert [m.id for m in store.messages(conversation.id)][-1] == made[0].row
        await pilot.press("alt+right")
        assert pane(app).session.tree.path()[-1] is siblings[2]
