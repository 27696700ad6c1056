"""F1 and the command palette show the keys as [keys] in config.toml rebinds them, and F1
lists every binding of the chat's widgets and screens, with ids that [keys] accepts."""

from __future__ import annotations

from fakes.engines import ScriptedEngine
from test_ui import SIZE

from chatapp.config import Config
from chatapp.ui.app import ChatApp
from chatapp.ui.launch import binding_ids
from chatapp.ui.screens.help import HelpScreen

REBOUND = {"chat.regenerate": "ctrl+g", "tokens.rejected": "x", "prompt.newline": "ctrl+j"}


async def test_f1_and_the_palette_show_rebound_keys_and_every_binding():
    app = ChatApp(lambda: ScriptedEngine(), config=Config(keymap=REBOUND))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = {bid: key for key, _does, bid in app.screen.rows if bid}
        for bid, key in REBOUND.items():
            assert keys[bid] == key, f"F1 shows {keys.get(bid)!r} for {bid}, not {key!r}"
        known = binding_ids()
        assert set(keys) <= known, f"ids [keys] rejects: {set(keys) - known}"
        chat_ids = {i for i in known if not i.startswith("vs.")}  # (--vs: its own screen)
        assert chat_ids <= set(keys), f"not in F1: {sorted(chat_ids - set(keys))}"
        assert {"tokens.rejected", "tokens.home", "tokens.end"} <= set(keys)
        fixed = {key for key, _does, bid in app.screen.rows if not bid}
        assert {"enter", "ctrl+p", "ctrl+q"} <= fixed  # shown, but not as rebindable
        await pilot.press("escape")
        await pilot.pause()
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "ctrl+g" in commands["Regenerate"] and "ctrl+r" not in commands["Regenerate"]


def test_every_pane_key_names_a_command_of_the_conversation():
    import inspect

    from textual.actions import parse

    from chatapp.ui.conversation.commands import Commands
    from chatapp.ui.screens.chat import ChatScreen

    named = [parse(b.action) for b in ChatScreen.BINDINGS if b.action.startswith("pane(")]
    assert len(named) >= 12
    for _, action, (command, *args) in named:
        assert action == "pane"
        method = getattr(Commands, command)
        inspect.signature(method).bind(None, *args)  # (self, then the key's arguments)


def test_every_view_key_names_a_method_of_the_panel_view():
    from textual.actions import parse

    from chatapp.ui.screens.chat import ChatScreen
    from chatapp.ui.screens.panel_view import PanelView

    named = [parse(b.action) for b in ChatScreen.BINDINGS if b.action.startswith("view(")]
    assert len(named) == 7
    for _, action, (name, *args) in named:
        assert action == "view" and not args
        assert callable(getattr(PanelView, name)) and not name.startswith("_")
