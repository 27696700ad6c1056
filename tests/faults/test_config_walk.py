"""Every key of config.toml, given bad values of its type and values of other types, one at a
time: one problem line naming the key and the default kept, or the value taken; never a
traceback, and `config show` still prints TOML that reads back."""

from __future__ import annotations

import json
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from chatapp.config import Config, load_config
from chatapp.sampling import SamplerSettings

MISSING = "<missing path>"
FOLDER = "<a folder>"

OTHER_TYPES = ["[]", "{}", "true", '"x"', "1.5", "1"]
BAD: dict[str, list[str]] = {  # TOML literals, by the kind of the key
    "int": ["-1", "0", "1000000000000", "9223372036854775807", "1.5", "nan", "inf", '""'],
    "float": ["nan", "inf", "-inf", "-1.0", "0.0", "1e308", '""', "-0.0"],
    "bool": ['"yes"', "1", "0", '""'],
    "text": [
        json.dumps(value)
        for value in ["", " ", "\n", "a\nb", "\x1b[31mx", "[bold]x[/]", "日本語 ✓", "x" * 5000]
    ]
    + [MISSING, FOLDER],
}

SCALARS = {
    "default_model": "text",
    "model_dirs": "text",
    "n_ctx": "int",
    "n_gpu_layers": "int",
    "threads": "int",
    "flash_attn": "bool",
    "repack": "bool",
    "huge_pages": "bool",
    "exact_batches": "bool",
    "autotune": "bool",
    "think": "bool",
    "draft": "text",
    "system_prompt": "text",
    "theme": "text",
}
SAMPLER = {f.name: "int" if f.type == "int" else "float" for f in fields(SamplerSettings)}
KEYS: dict[str, str] = {
    **SCALARS,
    **{f"sampler.{name}": kind for name, kind in SAMPLER.items()},
    **{f"presets.mine.{name}": kind for name, kind in SAMPLER.items()},
    "keys.chat.new": "text",
    "servers.mine.url": "text",
    "servers.mine.api_key_env": "text",
    "servers.mine.model_name": "text",
    "prompts.mine.text": "text",
}


def test_the_walk_covers_every_key_config_has():
    """A key added to Config is walked too (or this test names it)."""
    tables = {"sampler", "presets", "keymap", "servers", "prompts"}
    assert {f.name for f in fields(Config)} - tables == set(SCALARS)


def _cases():
    for key, kind in KEYS.items():
        for value in [*BAD[kind], *OTHER_TYPES]:
            yield pytest.param(key, value, id=f"{key}={value[:20]}")


def _fill(value: str, tmp: Path) -> str:
    places = {MISSING: tmp / "no such folder" / "x.gguf", FOLDER: tmp}
    return json.dumps(str(places[value])) if value in places else value


def _field(config: Config, key: str):
    """What the Config holds for a dotted key (None: nothing there)."""
    head, _, rest = key.partition(".")
    if not rest:
        return getattr(config, head)
    if head == "sampler":
        return getattr(config.sampler, rest)
    name, _, leaf = rest.partition(".")
    table = {"keys": config.keymap, "presets": config.presets, "servers": config.servers}
    if head == "keys":
        return config.keymap.get(rest)
    if head == "prompts":
        return config.prompts.get(name)
    found = table[head].get(name)
    return None if found is None else getattr(found, leaf)


def _default(key: str):
    head, _, leaf = key.rpartition(".")
    if head in ("", "sampler"):
        return _field(Config(), key)
    if head == "presets.mine":  # a preset's bad field: the built-in default, as left out
        return getattr(SamplerSettings(), leaf)
    return None  # a server, prompt or key binding with a bad entry: left out


@pytest.mark.parametrize(("key", "value"), list(_cases()))
def test_a_bad_config_value_is_one_problem_naming_its_key_and_the_default_is_kept(
    key, value, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "config.toml"
    lines = [f"{key} = {_fill(value, tmp_path)}"]
    if key.startswith("servers.mine.") and not key.endswith(".url"):
        lines.append('servers.mine.url = "http://127.0.0.1:9"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("CHATAPP_CONFIG", str(path))

    config, problems = load_config(path)

    assert all(len(p.splitlines()) == 1 for p in problems), problems
    names = [key, key.rpartition(".")[0]] if key.count(".") > 1 else [key]
    named = [p for p in problems if any(name in p for name in names)]
    if named:
        assert _field(config, key) == _default(key), (problems, _field(config, key))
    else:
        assert not problems, problems

    from chatapp.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["config", "show"])
    out, err = capsys.readouterr()
    assert exit_.value.code in (0, 1), err
    assert "Traceback" not in out + err
    assert all(line.startswith("warning: ") for line in err.splitlines()), err
    shown = tomllib.loads(out)  # what `config show` prints reads back
    assert shown.get("n_ctx", config.n_ctx) == config.n_ctx


@pytest.mark.parametrize(
    "url",
    ["http://[bold]x[/]", "http://\\u001b[31mx", "http:///tmp/x", "http://x:99999", "http://x:y"],
)
def test_a_server_url_that_is_no_address_is_a_problem_as_it_is_for_server(url, tmp_path):
    """config's [servers.NAME] url and --server have one check (config.url_problem); a url
    httpx cannot parse passed the old prefix check and failed in the chat."""
    path = tmp_path / "config.toml"
    path.write_text(f'[servers.mine]\nurl = "{url}"\n', encoding="utf-8")
    config, problems = load_config(path)
    assert config.servers == {} and len(problems) == 1, problems
    assert problems[0].startswith("config.toml: servers.mine.url "), problems
