"""Pilot tests of structured output in the TUI: the picker, the status line, the grammar's cut."""

from __future__ import annotations

import json

from fakes.engines import ScriptedEngine
from helpers import SIZE, pane, send, status, wait_until

from chatapp.ui.app import ChatApp
from chatapp.ui.screens.grammar import GrammarScreen


async def test_a_schema_for_the_conversation_reaches_every_request_and_shows(tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"enum": [1, 2]}}}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "number", "minimum": 2}')
    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("alt+g")
        await wait_until(pilot, lambda: isinstance(app.screen, GrammarScreen))
        box = app.screen.query_one("#grammar-path")
        box.value = str(bad)
        await pilot.press("enter")
        await pilot.pause()
        error = str(app.screen.query_one("#grammar-error").render())
        assert "bad.json" in error and "minimum" in error  # one sentence; the dialog stays
        box.value = str(schema)
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, GrammarScreen))
        assert (
            pane(app).session.grammar is not None and "root ::=" in pane(app).session.grammar.gbnf
        )
        assert status(app).startswith("⊘ schema person.json")
        await send(pilot, app, "Who?")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        assert engine.requests[-1].grammar == pane(app).session.grammar
        assert "⊘ schema person.json" in status(app)  # still there after the reply
        drawn = str(app.chat_screen.view.probs.render())
        assert "⊘ cut by the grammar" in drawn and drawn.count("⊘") == 2
        await pilot.press("alt+g")
        await wait_until(pilot, lambda: isinstance(app.screen, GrammarScreen))
        await pilot.click("#clear")
        await wait_until(pilot, lambda: not isinstance(app.screen, GrammarScreen))
        assert pane(app).session.grammar is None and "⊘" not in status(app)


async def test_a_malformed_schema_in_the_dialog_is_one_sentence_and_the_app_stays(tmp_path):
    """properties as a list and a bound past any float raised out of the dialog: the app
    exited with a traceback. Now the dialog shows the sentence, literally, and stays."""
    cases = {
        "list.json": ('{"type": "object", "properties": ["age"]}', "properties must be"),
        "huge.json": (
            '{"properties": {"[/age]": {"type": "integer", "maximum": 1e400}}}',
            'schema huge.json: "/properties/[~1age]/maximum" is inf, out of range',
        ),
        "anyof.json": ('{"anyOf": 5}', "anyOf must be a non-empty list of schemas, not 5"),
    }
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("alt+g")
        await wait_until(pilot, lambda: isinstance(app.screen, GrammarScreen))
        for name, (text, words) in cases.items():
            (tmp_path / name).write_text(text)
            app.screen.query_one("#grammar-path").value = str(tmp_path / name)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, GrammarScreen) and app.is_running
            error = str(app.screen.query_one("#grammar-error").render())
            assert words in error, error
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, GrammarScreen))
        assert pane(app).session.grammar is None
