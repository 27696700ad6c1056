"""System prompts by name: [prompts.NAME] in config.toml, and the ones saved from F2 in
prompts.json beside it (config.toml is the user's own file and is never rewritten)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chatapp import jsonfile, paths
from chatapp.config import Config
from chatapp.errors import ChatappError, UsageError

PROMPTS_NAME = "prompts.json"


class PromptError(ChatappError):
    """A named prompt that cannot be saved, deleted or found; str() is one sentence."""


@dataclass(frozen=True)
class NamedPrompt:
    name: str
    text: str
    saved: bool  # True: in prompts.json (F2 can change and delete it); False: config.toml's


def prompts_file() -> Path:
    return paths.config_dir() / PROMPTS_NAME


def saved_prompts() -> dict[str, str]:
    """The prompts saved from F2 ({} when none or unreadable; a broken file is kept aside)."""
    data = jsonfile.read_dict(prompts_file())
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def all_prompts(config: Config) -> list[NamedPrompt]:
    """Every named prompt, sorted by name; a saved one replaces config.toml's of that name."""
    found = {n: NamedPrompt(n, t, False) for n, t in config.prompts.items()}
    found.update({n: NamedPrompt(n, t, True) for n, t in saved_prompts().items()})
    return [found[n] for n in sorted(found, key=str.lower)]


def save_prompt(name: str, text: str) -> None:
    """Save (or replace) a named prompt in prompts.json."""
    name = name.strip()
    if not name or name.startswith("@") or any(c.isspace() for c in name):
        raise PromptError(f"a prompt's name is one word without spaces or @, got {name!r}")
    if not text.strip():
        raise PromptError("the prompt is empty; write its text first")
    _update(lambda saved: saved.update({name: text}))


def delete_prompt(name: str, config: Config) -> None:
    """Delete a saved prompt; config.toml's own are deleted there (one sentence says so)."""

    def remove(saved: dict) -> None:
        if not isinstance(saved.get(name), str):
            if name in config.prompts:
                raise PromptError(f"{name} is in config.toml ([prompts.{name}]); delete it there")
            raise PromptError(f"there is no prompt named {name}")
        del saved[name]

    _update(remove)


def _update(change) -> None:
    """Change prompts.json under its lock (another app's save is kept; a broken file is kept
    aside first, never overwritten)."""
    path = prompts_file()
    try:
        jsonfile.update(path, change)
    except jsonfile.JsonFileError as exc:
        raise PromptError(f"cannot save the prompt: {exc}") from None
    except OSError as exc:
        raise PromptError(f"cannot save {path} ({exc.strerror or exc})") from None


def resolve_system(value: str | None, config: Config) -> str | None:
    """What `--system` means: text as it is, or `@NAME` for a named prompt (`@@...` is text
    starting with @). None stays None. UsageError names the prompts there are."""
    if value is None or not value.startswith("@"):
        return value
    if value.startswith("@@"):
        return value[1:]
    name = value[1:]
    for prompt in all_prompts(config):
        if prompt.name == name:
            return prompt.text
    names = ", ".join(p.name for p in all_prompts(config)) or "none yet: add [prompts.NAME]"
    raise UsageError(f"there is no system prompt named {name} (there are: {names})")
