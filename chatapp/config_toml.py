"""The effective config written back as TOML (for `chatapp config show`), every key shown."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from typing import Any

from chatapp.config import Config

# What leaving each optional key out means: `config show` prints it commented with this.
_UNSET = {
    "default_model": ('""', "the bundled model is used"),
    "flash_attn": ("true", "tuned, else off on the CPU (on with exact batches)"),
    "exact_batches": ("true", "from the first reply with drafts"),
    "repack": ("true", "on, unless it crashed on this machine"),
    "huge_pages": ("true", "on where Linux offers them"),
    "think": ("true", "the chat template's own default"),
    "draft": ('"ngram"', "off: one token at a time"),
}


def to_toml(config: Config) -> str:
    """The config as TOML text that load_config reads back to an equal Config: every key, the
    ones not set commented (`# key = example  (not set: what that means)`), and the tables
    with none in them shown by a commented example."""
    top = {
        "default_model": config.default_model,
        "model_dirs": list(config.model_dirs),
        "n_ctx": config.n_ctx,
        "n_gpu_layers": config.n_gpu_layers,
        "threads": config.threads or 0,
        "flash_attn": config.flash_attn,
        "repack": config.repack,
        "huge_pages": config.huge_pages,
        "exact_batches": config.exact_batches,
        "autotune": config.autotune,
        "think": config.think,
        "draft": config.draft or None,
        "system_prompt": config.system_prompt,
        "theme": config.theme,
    }
    lines = [
        f"{k} = {_value(v)}"
        if v is not None
        else f"# {k} = {_UNSET[k][0]}  (not set: {_UNSET[k][1]})"
        for k, v in top.items()
    ]
    lines += ["", "[sampler]", *_pairs(config.sampler.to_dict())]
    for name, preset in config.presets.items():
        lines += ["", f"[presets.{_key(name)}]", *_pairs(preset.to_dict())]
    if not config.presets:
        lines += ["", "# [presets.NAME]  (none: sampler keys as in [sampler])"]
    lines += ["", "[keys]", *_pairs(config.keymap)]
    if not config.keymap:
        lines += ['# chat.regenerate = "ctrl+r"  (none rebound: F1 lists the ids and keys)']
    for name, server in config.servers.items():
        values = {f.name: getattr(server, f.name) for f in fields(server)}
        lines += ["", f"[servers.{_key(name)}]", *_pairs(values)]
    if not config.servers:
        lines += [
            "",
            '# [servers.NAME]  (none: url = "http://127.0.0.1:8080", api_key_env, model_name)',
        ]
    for name, text in config.prompts.items():
        lines += ["", f"[prompts.{_key(name)}]", *_pairs({"text": text})]
    if not config.prompts:
        lines += ["", '# [prompts.NAME]  (none: text = "a system prompt"; chat --system @NAME)']
    return "\n".join(lines) + "\n"


def _pairs(data: dict[str, Any]) -> list[str]:
    return [f"{_key(k)} = {_value(v)}" for k, v in data.items() if v is not None]


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
