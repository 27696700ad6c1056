"""config.toml loading: defaults, one named problem per bad entry, bad TOML, remembered theme."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from chatapp import paths
from chatapp.config import Config, ServerConfig, load_config
from chatapp.config_state import effective_theme, load_state, save_theme, state_file
from chatapp.config_toml import to_toml
from chatapp.sampling import PRESETS, SamplerSettings

pytestmark = pytest.mark.usefixtures("fresh_dirs")


def _write(text: str) -> Path:
    path = paths.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


FULL = """
default_model = "~/models/smol.gguf"
model_dirs = ["~/models", "rel"]
n_ctx = 8192
n_gpu_layers = 0
threads = 1
flash_attn = true
repack = false
system_prompt = "You are terse."
theme = "nord"

[sampler]
temperature = 0.5
top_k = 20

[presets.code]
temperature = 0.1
max_tokens = 2048

[keys]
quit = "ctrl+q"
toggle_panel = "f2,ctrl+p"

[servers.local]
url = "http://127.0.0.1:8080"
model_name = "smol"

[servers.cloud]
url = "https://api.example.invalid/v1"
api_key_env = "MY_KEY"
"""


def test_no_file_gives_defaults() -> None:
    assert load_config() == (Config(), [])


def test_full_config_loads(tmp_path: Path) -> None:
    path = _write(FULL)
    config, problems = load_config()
    assert problems == []
    assert config.default_model == str(Path.home() / "models" / "smol.gguf")
    assert config.model_dirs == (str(Path.home() / "models"), str(path.parent / "rel"))
    assert (config.n_ctx, config.n_gpu_layers, config.threads) == (8192, 0, 1)
    assert (config.flash_attn, config.repack) == (True, False)
    assert config.system_prompt == "You are terse." and config.theme == "nord"
    assert config.sampler == SamplerSettings(temperature=0.5, top_k=20)
    assert config.presets == {"code": SamplerSettings(temperature=0.1, max_tokens=2048)}
    assert config.all_presets()["code"].max_tokens == 2048
    assert config.all_presets()["greedy"] == PRESETS["greedy"]
    assert config.keymap == {"quit": "ctrl+q", "toggle_panel": "f2,ctrl+p"}
    assert config.servers == {
        "local": ServerConfig("http://127.0.0.1:8080", model_name="smol"),
        "cloud": ServerConfig("https://api.example.invalid/v1", api_key_env="MY_KEY"),
    }


def test_each_bad_entry_is_named_and_the_rest_loads() -> None:
    _write(
        """
n_ctx = "big"
threads = 0
colour = "red"
n_gpu_layers = true
repack = "no"

[sampler]
top_p = 2
temperature = 0.3
typo = 1

[presets.bad]
top_k = -1
min_p = 0.2

[keys]
quit = 3

[servers.nourl]
model_name = "x"

[servers.ftp]
url = "ftp://host"

[servers.ok]
url = "http://h:1"
token = "secret"
"""
    )
    config, problems = load_config()
    assert problems == [
        'config.toml: n_ctx must be a whole number, got "big"',
        "config.toml: unknown key colour (allowed: autotune, default_model, draft, exact_batches, "
        "flash_attn, huge_pages, keys, model_dirs, n_ctx, n_gpu_layers, presets, prompts, repack, "
        "sampler, servers, system_prompt, theme, think, threads)",
        "config.toml: n_gpu_layers must be a whole number, got True",
        'config.toml: repack must be true or false, got "no"',
        "config.toml: sampler.top_p must be between 0 and 1, got 2",
        "config.toml: unknown key sampler.typo (allowed: max_tokens, min_p, repeat_last_n, "
        "repeat_penalty, seed, temperature, top_k, top_p)",
        "config.toml: presets.bad.top_k must be between 0 and 200, got -1",
        'config.toml: keys.quit must be a key like "ctrl+q", got 3',
        'config.toml: servers.nourl.url is missing (e.g. url = "http://127.0.0.1:8080")',
        'config.toml: servers.ftp.url must start with http:// or https://, got "ftp://host"',
        "config.toml: unknown key servers.ok.token (allowed: api_key_env, model_name, url)",
    ]
    default = Config()
    assert config.n_ctx == default.n_ctx and config.n_gpu_layers == default.n_gpu_layers
    assert config.threads is None  # 0 = all cores
    assert config.sampler == SamplerSettings(temperature=0.3)  # top_p kept its default
    assert config.presets == {"bad": SamplerSettings(min_p=0.2)}
    assert config.keymap == {}
    assert config.servers == {"ok": ServerConfig("http://h:1")}


def test_bad_toml_names_the_line_and_uses_defaults() -> None:
    _write('theme = "nord"\n\n[sampler\ntemperature = 0.2\n')
    config, problems = load_config()
    assert config == Config()
    assert len(problems) == 1
    assert problems[0].startswith("config.toml: invalid TOML: ")
    assert "line 3" in problems[0]


def test_not_utf8_and_unreadable(tmp_path: Path) -> None:
    path = _write("")
    path.write_bytes(b'theme = "\xff"\n')
    config, problems = load_config()
    assert config == Config() and "not UTF-8" in problems[0]
    assert load_config(tmp_path)[1][0].startswith(f"{tmp_path}: cannot read the config file")


def test_wrong_table_types() -> None:
    _write("sampler = 3\npresets = { x = 1 }\n")
    config, problems = load_config()
    assert problems == [
        "config.toml: sampler must be a table ([sampler]), got 3",
        "config.toml: presets.x must be a table ([presets.x])",
    ]
    assert config == Config()


def test_to_toml_round_trips() -> None:
    _write(FULL + '\n[presets."with space"]\nseed = 7\n')
    config, problems = load_config()
    assert problems == []
    text = to_toml(config)
    tomllib.loads(text)
    _write(text)
    assert load_config() == (config, [])
    default = to_toml(Config())
    assert default.startswith('# default_model = ""  (not set') and "\nn_ctx = 4096\n" in default
    tricky = Config(system_prompt='quote " back\\ tab\t nl\n del\x7f é')
    _write(to_toml(tricky))
    assert load_config()[0].system_prompt == tricky.system_prompt


def test_theme_is_remembered_until_the_config_theme_changes() -> None:
    assert effective_theme(Config()) == Config().theme
    save_theme("gruvbox")
    assert state_file().parent == paths.config_dir()
    assert load_state()["theme"] == "gruvbox"
    assert effective_theme(load_config()[0]) == "gruvbox"
    assert not paths.config_file().exists()  # the user's file is never written
    _write('theme = "nord"\n')
    assert effective_theme(load_config()[0]) == "nord"  # the user edited the file since
    save_theme("dracula")
    assert effective_theme(load_config()[0]) == "dracula"
    state_file().write_text("{ not json")
    assert load_state() == {} and effective_theme(load_config()[0]) == "nord"


def test_config_show_prints_every_key_unset_ones_commented(capsys) -> None:
    """README: `config show` "prints every key with its value"; a key that is not set is
    printed commented, with what not setting it means."""
    from dataclasses import fields

    from chatapp.commands.config import config_show

    assert config_show() == 0
    out = capsys.readouterr().out
    tables = {"sampler", "presets", "keymap", "servers", "prompts"}
    for key in [f.name for f in fields(Config) if f.name not in tables]:
        assert f"\n{key} = " in out or f"\n# {key} = " in out, f"{key} missing"
    for key in [f.name for f in fields(SamplerSettings)]:
        assert f"\n{key} = " in out, f"sampler.{key} missing"
    for table in ("[sampler]", "[presets.", "[keys]", "[servers.", "[prompts."):
        assert table in out, f"{table} missing"
    for unset in ("default_model", "flash_attn", "repack", "huge_pages", "think", "draft"):
        assert f"\n# {unset} = " in out and "(not set" in out.split(f"\n# {unset} = ")[1]
    assert '\n# default_model = ""  (not set' in out
    tomllib.loads(out)  # still TOML, and it reads back as the defaults
    _write(out)
    assert load_config() == (Config(), [])
