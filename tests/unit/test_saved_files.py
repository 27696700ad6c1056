"""The app's own JSON files (prompts.json, state.json, machine.json, gpu-layers.json): one that
does not parse is kept aside and the user told where, never overwritten; updates from several
processes at once all land (a lock and an atomic write)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE, run_cli, screen_text, wait_until

from chatapp import jsonfile, machine, paths
from chatapp.chat.prompts import prompts_file, save_prompt, saved_prompts
from chatapp.config_state import load_state, save_state, state_file
from chatapp.engine.local.load import gpu_fallback
from chatapp.ui.app import ChatApp
from chatapp.ui.screens.system_prompt import SystemPromptScreen

pytestmark = pytest.mark.usefixtures("fresh_dirs")

HAND_EDITED = '{\n  "reviewer": "You review my code. Be brief, and kind.",\n}\n'  # trailing comma


def kept_aside(path) -> list:
    return sorted(path.parent.glob(f"{path.name}.broken-*"))


@pytest.fixture
def notices():
    """The sentences jsonfile says (instead of stderr)."""
    heard: list[str] = []
    jsonfile.listen(heard.append)
    yield heard
    jsonfile.unlisten(heard.append)


async def test_a_broken_prompts_file_survives_an_f2_save():
    prompts_file().parent.mkdir(parents=True, exist_ok=True)
    prompts_file().write_text(HAND_EDITED)
    app = ChatApp(lambda: ScriptedEngine())
    shown: list[tuple[str, dict]] = []
    async with app.run_test(size=SIZE) as pilot:
        app.notify = lambda text, **kw: shown.append((text, kw))
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        app.screen.query_one("#system-text").text = "Answer in one line."
        app.screen.query_one("#prompt-name").value = "terse"
        await pilot.click("#save-as")
        assert "saved as terse" in str(app.screen.query_one("#prompt-note").render())
    [aside] = kept_aside(prompts_file())
    assert aside.read_text() == HAND_EDITED, "the user's text is kept, byte for byte"
    assert saved_prompts() == {"terse": "Answer in one line."}
    [(text, kw)] = [(t, kw) for t, kw in shown if kw.get("title") == "Saved file kept aside"]
    assert text.startswith(f"{prompts_file()} is not valid JSON (")
    assert text.endswith(f"; it was kept as {aside}, and chatapp starts a new prompts.json")
    assert kw["markup"] is False  # a path is data, never markup


def note_of(app) -> str:
    return str(app.screen.query_one("#prompt-note").render())


async def test_f2_says_where_a_broken_prompts_file_went_in_its_note_and_a_notice():
    """Broken before F2 opens (kept aside as it lists the prompts) and again while it is open
    (kept aside by the save): each time the dialog's note names the file it was kept as, and
    the notice on the screen gives the whole path."""
    prompts_file().parent.mkdir(parents=True, exist_ok=True)
    prompts_file().write_text(HAND_EDITED)
    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, SystemPromptScreen))
        [first] = kept_aside(prompts_file())
        assert note_of(app) == f"prompts.json did not parse: kept as {first.name}"
        prompts_file().write_text("[1, 2]")  # broken again by hand, the dialog open
        app.screen.query_one("#system-text").text = "Answer in one line."
        app.screen.query_one("#prompt-name").value = "gamma"
        await pilot.click("#save-as")
        [second] = [p for p in kept_aside(prompts_file()) if p != first]
        assert note_of(app) == f"saved as gamma; prompts.json did not parse: kept as {second.name}"
        told = [n.message for n in app._notifications if n.title == "Saved file kept aside"]
        assert [m.split("; it was kept as ")[1] for m in told] == [
            f"{first}, and chatapp starts a new prompts.json",
            f"{second}, and chatapp starts a new prompts.json",
        ]
        await pilot.pause()
        assert "Saved file kept aside" in screen_text(app)  # drawn, over the dialog
    assert first.read_text() == HAND_EDITED and second.read_text() == "[1, 2]"
    assert saved_prompts() == {"gamma": "Answer in one line."}


def test_the_cli_says_on_stderr_where_a_broken_prompts_file_went():
    prompts_file().parent.mkdir(parents=True, exist_ok=True)
    prompts_file().write_text(HAND_EDITED)
    r = run_cli("ask", "hi", "--system", "@reviewer")  # read to find @reviewer: kept aside
    [aside] = kept_aside(prompts_file())
    assert aside.read_text() == HAND_EDITED
    warning, error = r.stderr.strip().splitlines()
    assert warning.startswith(f"warning: {prompts_file()} is not valid JSON (")
    assert warning.endswith(f"; it was kept as {aside}, and chatapp starts a new prompts.json")
    assert error.startswith("error: there is no system prompt named reviewer") and r.returncode == 2


@pytest.mark.parametrize(
    "path, read, write",
    [
        (prompts_file, saved_prompts, lambda: save_prompt("terse", "One line.")),
        (state_file, load_state, lambda: save_state(theme="nord")),
        (lambda: paths.cache_dir() / machine.MEMORY_FILE, machine.recall,
         lambda: machine.remember(repack_crash="AMX")),
        (lambda: paths.cache_dir() / gpu_fallback.MEMORY_FILE,
         lambda: gpu_fallback.remembered_layers("/m.gguf"),
         lambda: gpu_fallback.remember_layers("/m.gguf", 12)),
    ],
    ids=["prompts.json", "state.json", "machine.json", "gpu-layers.json"],
)  # fmt: skip
@pytest.mark.parametrize(
    "broken",
    [HAND_EDITED, "[1, 2]", '{"a": ' * 100 + "1" + "}" * 100],
    ids=["trailing-comma", "not-an-object", "too-deep"],
)
def test_a_broken_file_is_kept_aside_on_read_and_never_overwritten(
    path, read, write, broken, notices
):
    path = path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(broken)
    assert not read()  # read as empty...
    [aside] = kept_aside(path)  # ... and kept as it was
    assert aside.read_text() == broken
    assert not path.exists()
    assert notices == [notices[0]] and f"it was kept as {aside}" in notices[0]
    write()
    write()
    assert read() and aside.read_text() == broken
    assert kept_aside(path) == [aside]


def test_a_broken_machine_file_is_kept_aside_by_the_first_save_too(notices):
    path = paths.cache_dir() / machine.MEMORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"x": {"repack_crash": "AMX"}')  # cut short
    machine.remember_tune_crash("/m.gguf", "signal SIGSEGV")
    [aside] = kept_aside(path)
    assert aside.read_text() == '{"x": {"repack_crash": "AMX"}'
    assert machine.tune_crashed("/m.gguf") == "signal SIGSEGV"


def test_an_unreadable_file_is_left_alone(monkeypatch):
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"theme": "nord"}')

    def refused(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(jsonfile, "open", refused, raising=False)
    assert load_state() == {}
    with pytest.raises(Exception, match="Permission denied"):
        save_state(theme="dracula")
    monkeypatch.undo()
    assert path.read_text() == '{"theme": "nord"}' and not kept_aside(path)


def test_the_cli_says_on_stderr_where_a_broken_machine_file_went():
    path = paths.cache_dir() / machine.MEMORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"tuned": {},}')
    r = run_cli("ask", "Say hi.", "--temperature", "0", "--max-tokens", "2")
    assert r.returncode == 0, r.stderr
    [aside] = kept_aside(path)
    assert aside.read_text() == '{"tuned": {},}'
    assert f"warning: {path} is not valid JSON (" in r.stderr
    assert f"it was kept as {aside}" in r.stderr


def _save_tunes(worker: int, count: int) -> None:
    for i in range(count):
        machine.remember_tuned(f"/models/w{worker}-{i}.gguf", {"threads": i, "auto": True})


def test_tunes_saved_by_several_processes_at_once_all_land():
    """4 processes x 30 saves of distinct files into one machine.json: none lost (without the
    lock, two processes lost 42 of 120)."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_save_tunes, args=(w, 30)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    saved = machine.recall()["tuned"]
    assert len(saved) == 120
    assert saved[machine.file_key("/models/w3-29.gguf")] == {"threads": 29, "auto": True}
