"""The config keys at work: model_dirs, [servers.NAME], [presets.NAME], [keys], and the load
settings that every command takes from config.toml."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from fakes import gguf_files
from fakes.engines import FakeEngine, ScriptedEngine
from helpers import pane, run_cli, wait_until

from chatapp import paths
from chatapp.commands.settings import load_options, resolve_server, sampler_settings
from chatapp.config import Config, ServerConfig, load_config
from chatapp.engine.protocol import LoadOptions
from chatapp.errors import UsageError
from chatapp.models.bundled import smollm2_path
from chatapp.sampling import PRESETS, SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.launch import binding_ids, build_app
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.models import ModelPickerScreen

pytestmark = pytest.mark.usefixtures("fresh_dirs")
SIZE = (120, 40)


def _write_config(text: str) -> Path:
    path = paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _models_dir(root: Path) -> tuple[Path, Path]:
    """A folder with one valid GGUF file one level down."""
    folder = root / "my-models"
    (folder / "sub").mkdir(parents=True)
    return folder, gguf_files.write(folder / "sub", gguf_files.build(), "tiny.gguf")


# ---- model_dirs ------------------------------------------------------------------------------


def test_models_lists_the_files_in_config_model_dirs(tmp_path):
    folder, tiny = _models_dir(tmp_path)
    _write_config(
        f"model_dirs = [{json.dumps(str(folder))}, {json.dumps(str(tmp_path / 'gone'))}]\n"
    )
    r = run_cli("models", "--json")
    assert r.returncode == 0, r.stderr
    listed = {e["path"]: e for e in json.loads(r.stdout)}
    assert listed[str(tiny)]["source"] == "folder" and listed[str(tiny)]["error"] == ""
    assert any(e["source"] == "bundled" for e in listed.values())  # what it found before, too
    assert f"warning: model_dirs: cannot list models in {tmp_path / 'gone'}" in r.stderr
    # --dir folders are listed beside them; a missing --dir is still an error
    other = tmp_path / "other"
    other.mkdir()
    two = gguf_files.write(other, gguf_files.build(), "two.gguf")
    r = run_cli("models", "--dir", str(other))
    assert r.returncode == 0, r.stderr
    assert str(tiny) in r.stdout and str(two) in r.stdout
    r = run_cli("models", "--dir", str(tmp_path / "nope"))
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith("error: cannot list models in")


async def test_model_picker_lists_config_model_dirs(tmp_path):
    folder, tiny = _models_dir(tmp_path)
    config = Config(model_dirs=(str(folder), str(tmp_path / "gone")))
    options = LoadOptions(model_path=str(smollm2_path()))
    app = ChatApp(lambda: ScriptedEngine(), options=options, config=config)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.slot.engine is not None)
        await pilot.press("f8")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        picker = app.screen
        await wait_until(pilot, lambda: str(tiny) in picker.entries)
        assert picker.entries[str(tiny)].ok
        assert str(smollm2_path()) in picker.entries  # the bundled model is still there


# ---- [servers.NAME] --------------------------------------------------------------------------


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_name_from_config_expands_to_its_url(monkeypatch):
    port = _dead_port()
    _write_config(f'[servers.box]\nurl = "http://127.0.0.1:{port}"\napi_key_env = "BOX_KEY"\n')
    monkeypatch.delenv("BOX_KEY", raising=False)
    r = run_cli("ask", "hi", "--server", "box")  # the server's api_key_env is used
    assert r.returncode == 1
    assert r.stderr.startswith("error: the environment variable $BOX_KEY is not set")
    monkeypatch.setenv("BOX_KEY", "secret")
    r = run_cli("ask", "hi", "--server", "box")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"error: cannot connect to http://127.0.0.1:{port}" in r.stderr
    # a URL works as before
    r = run_cli("ask", "hi", "--server", f"127.0.0.1:{port}")
    assert r.returncode == 1 and f"http://127.0.0.1:{port}" in r.stderr


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_unknown_server_name_is_one_error_line_naming_the_configured_ones(command):
    _write_config('[servers.box]\nurl = "http://10.0.0.1:8080"\n[servers.gpu]\nurl = "http://g"\n')
    args = ["ask", "hi"] if command == "ask" else ["chat"]
    r = run_cli(*args, "--server", "nope")
    assert r.returncode == 2  # a usage error
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown server 'nope'")
    assert "configured servers: box, gpu" in lines[0]


def test_resolve_server_options_given_win_over_the_config():
    config = Config(servers={"box": ServerConfig("http://b:1", "BOX_KEY", "big")})
    assert resolve_server("box", None, None, config) == (
        "http://b:1",
        {"api_key_env": "BOX_KEY", "model_name": "big"},
    )
    assert resolve_server("box", "MINE", "small", config)[1] == {
        "api_key_env": "MINE",
        "model_name": "small",
    }
    assert resolve_server("https://x.org/v1", None, None, config)[0] == "https://x.org/v1"
    assert resolve_server(None, None, None, config)[0] is None
    with pytest.raises(UsageError, match=r"no servers are configured"):
        resolve_server("box", None, None, Config())


# ---- [presets.NAME] --------------------------------------------------------------------------


async def test_user_presets_are_buttons_beside_the_built_in_ones():
    code = SamplerSettings(temperature=0.1, top_k=7)
    mixed = SamplerSettings(temperature=1.3, min_p=0.2)
    config = Config(presets={"code": code, "my mix": mixed})
    app = ChatApp(lambda: ScriptedEngine(), config=config)
    async with app.run_test(size=SIZE) as pilot:
        names = [b.name for b in app.query("#presets Button")]
        assert names == [*PRESETS, "code", "my mix"]
        await pilot.click("#preset-code")
        await pilot.pause()
        assert (
            pane(app).session.settings.temperature == 0.1 and pane(app).session.settings.top_k == 7
        )
        button = next(b for b in app.query("#presets Button") if b.name == "my mix")
        button.press()
        await pilot.pause()
        assert (
            pane(app).session.settings.temperature == 1.3
            and pane(app).session.settings.min_p == 0.2
        )


# ---- [keys] ----------------------------------------------------------------------------------


def test_keys_table_reads_dotted_binding_ids():
    _write_config('[keys]\napp.help = "f12"\n"chat.new" = "ctrl+g"\n')
    config, problems = load_config()
    assert problems == [] and config.keymap == {"app.help": "f12", "chat.new": "ctrl+g"}
    assert {"app.help", "chat.new", "models.load", "slider.less"} <= binding_ids()


async def test_configured_key_triggers_its_action():
    app = ChatApp(lambda: ScriptedEngine(), config=Config(keymap={"app.help": "f12"}))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")  # the default key no longer opens the help
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f12")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))


def test_an_unknown_binding_id_is_a_startup_note():
    config = Config(keymap={"chat.nope": "f12", "chat.new": "ctrl+g"})
    app = build_app(LoadOptions(model_path=str(smollm2_path())), config=config)
    assert app.startup_notes == [
        "config.toml: keys.chat.nope is not a key binding id (see F1 for them)"
    ]


# ---- the load settings of every command ------------------------------------------------------


def test_load_options_given_then_config_then_defaults(tmp_path):
    model = str(smollm2_path())
    default = LoadOptions(model_path=model)
    assert load_options(Path(model), config=Config()) == default
    config = Config(n_ctx=1024, n_gpu_layers=0, threads=3, flash_attn=True, repack=False)
    assert load_options(Path(model), config=config) == LoadOptions(
        model, n_ctx=1024, n_gpu_layers=0, n_threads=3, n_batch=512, flash_attn=True, repack=False
    )
    given = load_options(
        Path(model),
        ctx=256,
        ngl=5,
        threads=2,
        batch=1024,
        flash_attn=False,
        repack=True,
        config=config,
    )
    assert given == LoadOptions(model, 256, 5, 2, 256, False, True)  # batch capped at ctx
    assert load_options(None, config=config, find_model=False).model_path == ""
    assert sampler_settings(Config(sampler=SamplerSettings(top_k=3)), top_k=None, seed=9) == (
        SamplerSettings(top_k=3, seed=9)
    )


@pytest.mark.slow
def test_ask_takes_its_load_and_sampler_settings_from_the_config():
    _write_config(
        "n_ctx = 512\nthreads = 1\nrepack = false\n[sampler]\ntemperature = 0.0\nmax_tokens = 3\n"
    )
    r = run_cli("ask", "Say hi.", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["completion_tokens"] <= 3
    assert data["settings"]["threads"] == 1 and data["settings"]["repack"] is False


def test_bench_takes_n_ctx_from_the_config():
    _write_config("n_ctx = 256\n")
    r = run_cli("bench", "--depth", "200", "--tokens", "100")
    assert r.returncode == 2  # a usage error
    assert r.stderr.strip() == (
        "error: --depth 200 + --tokens 100 do not fit in a context of 256 tokens: give a "
        "larger --ctx (or n_ctx in config.toml)"
    )


def test_compare_loads_every_file_with_the_config_settings(tmp_path):
    from chatapp.models import compare

    seen: list[LoadOptions] = []

    def engine(opts: LoadOptions) -> FakeEngine:
        seen.append(opts)
        return FakeEngine(opts)

    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).symlink_to(smollm2_path())
    config = Config(n_ctx=64, n_gpu_layers=7, threads=3, flash_attn=True, repack=False)
    options = load_options(None, config=config, find_model=False)
    files = [str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    result = compare.compare(files, tokens=4, options=options, make_engine=engine, save=False)
    assert [Path(o.model_path).name for o in seen] == ["a.gguf", "b.gguf"]
    for opts in seen:
        assert (opts.n_gpu_layers, opts.n_threads, opts.flash_attn, opts.repack) == (
            7,
            3,
            True,
            False,
        )
        assert opts.n_ctx == result.n_ctx >= 1024  # compare's own context, not n_ctx
    assert result.n_threads == 3
