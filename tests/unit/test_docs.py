"""The docs: the generated pages are fresh, every command and config key is in them, every page
is in the site's navigation, and every command they show exists with the options shown."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from chatapp.cli import app
from chatapp.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _all_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in _pages())


# -- generated pages --


@pytest.mark.parametrize("name", ["keys.md", "config.md"])
def test_generated_page_is_fresh(name):
    """docs/keys.md and docs/config.md are what scripts/gen_docs.py makes from the code now."""
    fresh = _generator().PAGES[name]()
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert committed == fresh, f"docs/{name} is stale: run python scripts/gen_docs.py"


def test_keys_page_lists_every_binding_id():
    from textual.app import App

    from chatapp.ui.keys import help_rows

    page = (DOCS / "keys.md").read_text(encoding="utf-8")
    ids = [binding_id for _, _, binding_id in help_rows(App()) if binding_id]
    assert ids and all(f"`{binding_id}`" in page for binding_id in ids)


# -- config keys --


def _allowed(tmp_path: Path, toml: str) -> list[str]:
    """The keys config.toml's loader takes at one place: it names them when a key is unknown."""
    path = tmp_path / "config.toml"
    path.write_text(toml, encoding="utf-8")
    problems = load_config(path)[1]
    found = [m for p in problems if (m := re.search(r"unknown key \S+ \(allowed: (.*)\)", p))]
    assert len(found) == 1, problems
    return found[0][1].split(", ")


def _documented(key: str, page: str) -> bool:
    """`key`, or a table header such as `[key]` / `[key.NAME]`, in the page."""
    return re.search(rf"`\[?{re.escape(key)}(\]|\.NAME\]|`)", page) is not None


def test_every_config_key_is_on_the_config_page(tmp_path):
    page = (DOCS / "config.md").read_text(encoding="utf-8")
    places = {
        "top level": "zz_unknown = 1",
        "[sampler]": "[sampler]\nzz_unknown = 1",
        "[servers.NAME]": '[servers.a]\nurl = "http://a"\nzz_unknown = "x"',
        "[prompts.NAME]": '[prompts.a]\ntext = "x"\nzz_unknown = "x"',
    }
    for place, toml in places.items():
        missing = [k for k in _allowed(tmp_path, toml) if not _documented(k, page)]
        assert not missing, f"config keys of {place} missing from docs/config.md: {missing}"


def test_config_page_generator_knows_the_loaders_keys(tmp_path):
    """The generator's key names (Config fields, renamed where the file spells them otherwise)
    are exactly those the loader takes."""
    loader_keys = set(_allowed(tmp_path, "zz_unknown = 1"))
    assert set(_generator().config_keys()) == loader_keys


# -- commands --


def _command_tree() -> dict[tuple[str, ...], object]:
    """Every command of the CLI by its path of words, the root as ()."""
    tree = {}

    def walk(command, path: tuple[str, ...]) -> None:
        tree[path] = command
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return tree


def test_every_command_is_in_the_docs():
    text = _all_text()
    missing = [
        " ".join(path)
        for path in _command_tree()
        if path and f"chatapp {' '.join(path)}" not in text
    ]
    assert not missing, f"commands no page mentions: {missing}"


def _code_chunks(text: str) -> list[str]:
    """Fenced code blocks (continued lines joined), then the inline code spans outside them."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    lines = [ln for block in fenced for ln in block.replace("\\\n", " ").splitlines()]
    spans = [m[2] for m in re.finditer(r"(`+)\s?(.+?)\s?\1", prose)]
    return lines + spans


def _invocations(chunk: str) -> list[list[str]]:
    """The argument lists of each `chatapp` run in a line of shell."""
    lexer = shlex.shlex(chunk, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    runs = []
    for i, word in enumerate(words):
        if word == "chatapp" and (i == 0 or words[i - 1] in SHELL_OPERATORS):
            rest = words[i + 1 :]
            end = next((j for j, w in enumerate(rest) if w in SHELL_OPERATORS), len(rest))
            runs.append(rest[:end])
    return runs


def _shown_commands() -> list[tuple[str, list[str]]]:
    shown = []
    for page in _pages():
        for chunk in _code_chunks(page.read_text(encoding="utf-8")):
            if "chatapp" in chunk:
                shown += [(page.name, argv) for argv in _invocations(chunk)]
    return shown


def _resolve(argv: list[str], tree) -> tuple[tuple[str, ...], list[str]]:
    """The command an argument list runs, and the options it gives (values and brackets off)."""
    path: tuple[str, ...] = ()
    words = [w.strip("[]") for w in argv]
    while words and (*path, words[0]) in tree:
        path = (*path, words.pop(0))
    options = [w.split("=")[0] for w in words if re.match(r"--?[A-Za-z]", w)]
    return path, options


def _options_of(command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(getattr(param, "opts", ()), getattr(param, "secondary_opts", ()))
    return names


def test_docs_show_commands_and_options_that_exist():
    tree = _command_tree()
    shown = _shown_commands()
    assert len(shown) > 40  # the parsing found the examples
    wrong = []
    for page, argv in shown:
        path, options = _resolve(argv, tree)
        command = tree[path]
        rest = argv[len(path) :]  # a group named alone (`chatapp steer`) is fine
        if getattr(command, "commands", None) and rest and not rest[0].startswith("-"):
            wrong.append(f"{page}: chatapp {' '.join(argv)}: no such command")
            continue
        unknown = [o for o in options if o not in _options_of(command)]
        if unknown:
            wrong.append(f"{page}: chatapp {' '.join(argv)}: no option {', '.join(unknown)}")
    assert not wrong, "\n".join(wrong)


def test_every_command_shown_in_the_docs_runs_with_help():
    tree = _command_tree()
    paths = sorted({_resolve(argv, tree)[0] for _, argv in _shown_commands()})
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output


# -- the site --


def test_every_page_is_in_the_navigation():
    """mkdocs.yml's nav (lines not commented out) names every page of docs/, and no other."""
    lines = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").splitlines()
    in_nav = {
        m[1]
        for ln in lines
        if not ln.lstrip().startswith("#")
        if (m := re.search(r":\s*(\S+\.md)\s*$", ln))
    }
    assert in_nav == {page.name for page in DOCS.glob("*.md")}


def test_readme_fits_a_few_screens():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
