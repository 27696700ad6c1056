"""System prompts by name: [prompts.NAME] in config.toml, saved ones from F2 (prompts.json),
`--system @NAME`, and the F2 dialog's pick, save as and delete."""

from __future__ import annotations

import json

import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE, one_error_line, pane, run_cli, wait_until

from chatapp import paths
from chatapp.chat.prompts import (
    PromptError,
    all_prompts,
    delete_prompt,
    prompts_file,
    resolve_system,
    save_prompt,
)
from chatapp.config import load_config
from chatapp.config_toml import to_toml
from chatapp.errors import UsageError
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.system_prompt import SystemPromptScreen

pytestmark = pytest.mark.usefixtures("fresh_dirs")

CONFIG = """
[prompts.reviewer]
text = "You review code. Be brief."

[prompts.pirate]
text = "Talk like a pirate."

[prompts.broken]
txt = "typo"
"""


def write_config(text: str = CONFIG) -> None:
    paths.config_file().parent.mkdir(parents=True, exist_ok=True)
    paths.config_file().write_text(text)


def test_config_prompts_parse_validate_and_show():
    write_config()
    config, problems = load_config()
    assert config.prompts == {
        "reviewer": "You review code. Be brief.",
        "pirate": "Talk like a pirate.",
    }
    assert problems == [
        'config.toml: prompts.broken must be a table with text = "..." ([prompts.broken])'
    ]
    shown = to_toml(config)
    assert '[prompts.reviewer]\ntext = "You review code. Be brief."' in shown
    paths.config_file().write_text(shown)
    assert load_config() == (config, [])


def test_saved_prompts_beside_the_config_and_system_at_name():
    write_config()
    config = load_config()[0]
    save_prompt("terse", "Answer in one line.")
    save_prompt("pirate", "Arr, a saved one.")  # replaces config.toml's for this name
    assert json.loads(prompts_file().read_text()) == {
        "terse": "Answer in one line.",
        "pirate": "Arr, a saved one.",
    }
    assert [(p.name, p.saved) for p in all_prompts(config)] == [
        ("pirate", True), ("reviewer", False), ("terse", True)
    ]  # fmt: skip
    assert resolve_system("@terse", config) == "Answer in one line."
    assert resolve_system("@reviewer", config) == "You review code. Be brief."
    assert resolve_system("plain text", config) == "plain text"
    assert resolve_system("@@handle", config) == "@handle"
    with pytest.raises(UsageError, match="no system prompt named nope .there are: pirate, "):
        resolve_system("@nope", config)
    with pytest.raises(PromptError, match="in config.toml"):
        delete_prompt("reviewer", config)
    with pytest.raises(PromptError, match="one word"):
        save_prompt("two words", "x")
    delete_prompt("terse", config)
    assert "terse" not in {p.name for p in all_prompts(config)}


async def test_f2_lists_picks_saves_as_and_deletes():
    write_config()
    app = ChatApp(lambda: ScriptedEngine(), config=load_config()[0])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        screen = app.screen
        names = screen.query_one("#prompt-names")
        assert [names.get_option_at_index(i).id for i in range(names.option_count)] == [
            "pirate", "reviewer"
        ]  # fmt: skip
        names.focus()
        names.highlighted = 1
        await pilot.press("enter")
        box = screen.query_one("#system-text")
        assert box.text == "You review code. Be brief."
        box.text = "You review Python code."
        screen.query_one("#prompt-name").value = "pyreview"
        await pilot.click("#save-as")
        assert "saved as pyreview" in str(screen.query_one("#prompt-note").render())
        assert names.option_count == 3
        names.highlighted = 0  # pirate (config.toml's): delete says where it lives
        await pilot.click("#delete")
        assert "delete it there" in str(screen.query_one("#prompt-note").render())
        await pilot.click("#save")
        await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen))
        assert pane(app).session.system_prompt == "You review Python code."
    assert resolve_system("@pyreview", load_config()[0]) == "You review Python code."


def test_system_at_an_unknown_name_is_one_sentence():
    write_config(CONFIG.split("[prompts.broken]")[0])
    r = run_cli("ask", "hi", "--system", "@nobody")
    assert "no system prompt named nobody (there are: pirate, reviewer)" in one_error_line(r, 2)
