"""Pilot tests of picking the next token in the probability panel, and of the branches it makes."""

from __future__ import annotations

import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, wait_until

from chatapp.chat.recorder import ChatHistory
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.history.store import Store
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.tokens import TokenStrip


def _done(app: ChatApp, n_requests: int, engine) -> bool:
    return (
        len(engine.requests) == n_requests
        and pane(app).reply is None
        and pane(app).last_reply is not None
    )


async def test_enter_picks_a_candidate_of_the_latest_step_and_alt_arrows_switch_branches(
    tmp_path,
):
    engine = ScriptedEngine()
    store = Store(tmp_path / "history.db")
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=8))
    pane(app).session.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(pilot, lambda: _done(app, 1, engine))
        first = list(pane(app).last_reply.tokens)
        first_text = pane(app).chat.items()[-1].text
        probs = app.query_one("#probs", ProbPanel)
        assert probs.step is None and probs.chosen == first[-1].id  # the latest step
        probs.focus()
        await pilot.pause()
        assert probs.cursor == 0  # on the token the sampler took
        await pilot.press("down", "down", "enter")
        picked = first[-1].candidates[2]
        await wait_until(pilot, lambda: _done(app, 2, engine))
        ids = [t.id for t in first]
        assert engine.requests[-1].reply_prefix_ids == (*ids[:-1], picked.id)
        assert [t.id for t in pane(app).last_reply.tokens][:8] == [*ids[:-1], picked.id]
        items = pane(app).chat.items()
        assert len(items) == 2 and items[-1].branch == "branch 2/2"
        second_text = items[-1].text
        assert second_text != first_text

        await pilot.press("alt+left")
        await wait_until(pilot, lambda: pane(app).chat.items()[-1].text == first_text)
        items = pane(app).chat.items()
        assert len(items) == 2 and items[-1].branch == "branch 1/2"
        assert "stop: max" in items[-1].footer, "the branch keeps its stats line"
        assert [t.id for t in pane(app).last_reply.tokens] == ids
        assert pane(app).session.conversation[-1].content == first_text
        assert len(app.chat_screen.view.token_panel.strip.tokens) == len(first)
        (conv,) = store.list_conversations()
        assert store.messages(conv.id)[-1].text == first_text  # the choice is saved

        await pilot.press("alt+right")
        await wait_until(pilot, lambda: pane(app).chat.items()[-1].text == second_text)
        assert pane(app).chat.items()[-1].branch == "branch 2/2"
        await pilot.press("alt+right")
        await pilot.pause()
        assert "no later branch" in str(app.query_one("#status-line").render())


async def test_click_picks_a_candidate_of_a_past_step_selected_in_the_tokens_tab():
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=8))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(pilot, lambda: _done(app, 1, engine))
        first = [t.id for t in pane(app).last_reply.tokens]
        app.query_one("#tabs").active = "tab-tokens"
        app.query_one("#reply-tokens", TokenStrip).cursor = 3
        await pilot.pause()
        app.query_one("#tabs").active = "tab-probs"
        await pilot.pause()
        probs = app.query_one("#probs", ProbPanel)
        assert probs.step == 3
        # header, c0, c1, c2, the top-p cut line, c3: a click on the line of candidate 3
        await pilot.click("#probs", offset=(6, 5))
        await wait_until(pilot, lambda: _done(app, 2, engine))
        prefix = engine.requests[-1].reply_prefix_ids
        assert prefix[:3] == tuple(first[:3]) and len(prefix) == 4
        assert prefix[3] == 3 + 3  # the scripted candidates of step n are n, n+1, ...
        assert pane(app).chat.items()[-1].branch == "branch 2/2"


async def test_picking_while_a_reply_streams_is_refused():
    engine = ScriptedEngine(delay=0.1)
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Go on")
        await wait_until(
            pilot, lambda: pane(app).reply is not None and len(pane(app).reply.tokens) >= 2
        )
        probs = app.query_one("#probs", ProbPanel)
        await wait_until(pilot, lambda: bool(probs.candidates))
        probs.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert len(engine.requests) == 1 and pane(app).reply is not None
        await pilot.press("escape")
        await wait_until(pilot, lambda: pane(app).reply is None)


async def test_regenerate_keeps_the_old_reply_as_a_branch():
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=4))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(pilot, lambda: _done(app, 1, engine))
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: _done(app, 2, engine))
        assert pane(app).chat.items()[-1].branch == "branch 2/2"
        assert pane(app).session.edits.branch_points() == [1]


@pytest.mark.slow
async def test_real_model_pick_a_token_and_switch_back(model_path):
    options = LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0)
    app = ChatApp(
        lambda: LocalEngine(options), settings=SamplerSettings(temperature=0.0, max_tokens=12)
    )
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        first_reply = pane(app).last_reply
        first = list(first_reply.tokens)
        first_text = pane(app).session.conversation[-1].content
        step = 1
        app.query_one("#reply-tokens", TokenStrip).cursor = step
        await pilot.pause()
        probs = app.query_one("#probs", ProbPanel)
        assert probs.step == step and probs.chosen == first[step].id
        probs.focus()
        await pilot.press("down", "enter")  # the second-best candidate at that step
        picked = first[step].candidates[1]
        # (the continuation can end before the next look: wait for its result, not for it
        # to be under way)
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not first_reply, 60
        )
        new = pane(app).last_reply
        assert [t.id for t in new.tokens[: step + 1]] == [first[0].id, picked.id]
        assert new.finished is not None and new.finished.reason in ("eog", "max_tokens")
        assert app.chat_screen.view.stats_panel.stats.prompt_reused > 0, "the KV cache was reused"
        assert pane(app).chat.items()[-1].branch == "branch 2/2"
        assert new.finished.text.startswith(first[0].text + picked.text)
        await pilot.press("alt+left")
        await wait_until(pilot, lambda: pane(app).session.conversation[-1].content == first_text)
        assert pane(app).chat.items()[-1].branch == "branch 1/2"


async def test_a_resumed_chat_has_its_branches_back(tmp_path):
    engine = ScriptedEngine()
    store = Store(tmp_path / "history.db")
    app = ChatApp(lambda: engine, settings=SamplerSettings(max_tokens=6))
    pane(app).session.history = ChatHistory(store, app._warn)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello")
        await wait_until(pilot, lambda: _done(app, 1, engine))
        first_text = pane(app).session.conversation[-1].content
        app.query_one("#probs", ProbPanel).focus()
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: _done(app, 2, engine))
        cid = pane(app).session.history.conversation_id
        await pilot.press("ctrl+n")
        await pilot.pause()
        await app.chat_screen.resume(cid)
        await pilot.pause()
        items = pane(app).chat.items()
        assert [i.branch for i in items] == ["", "branch 2/2"]
        await pilot.press("alt+left")
        await wait_until(pilot, lambda: pane(app).chat.items()[-1].text == first_text)
        assert "stop: max" in pane(app).chat.items()[-1].footer  # the stored stats line
        assert pane(app).last_reply is None, "a stored reply has no tokens to pick from"
