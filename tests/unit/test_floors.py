"""constraints/floors.txt pins every floor of pyproject.toml (scripts/check_floors.sh installs
them): the two stay in step, and the floors cover what the code uses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _floors_in_pyproject() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["test"]
    found = {}
    for spec in specs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*(?:>=|==)\s*([0-9][^,;\s]*)", spec)
        assert m, f"{spec!r} has no floor"
        found[m[1].lower()] = m[2]
    return found


def _pinned() -> dict[str, str]:
    lines = (ROOT / "constraints" / "floors.txt").read_text().splitlines()
    pairs = [ln.split("==") for ln in lines if ln.strip() and not ln.startswith("#")]
    return {name.strip().lower(): version.strip() for name, version in pairs}


def _version(text: str) -> tuple[int, ...]:
    parts = [int(x) for x in re.findall(r"\d+", text)]
    while parts and parts[-1] == 0:
        parts.pop()  # 5.0 == 5.0.0
    return tuple(parts)


def test_floors_txt_pins_each_floor_of_pyproject():
    pinned = _pinned()
    for name, floor in _floors_in_pyproject().items():
        assert name in pinned, f"{name} is not in constraints/floors.txt"
        assert _version(pinned[name]) == _version(floor), (
            f"{name}: floor {floor}, pinned {pinned[name]}"
        )


def test_textual_floor_has_markdown_get_stream():
    """The chat streams replies through Markdown.get_stream, new in Textual 5.0."""
    assert "get_stream(" in (ROOT / "chatapp/ui/widgets/chat.py").read_text()
    floor = _floors_in_pyproject()["textual"]
    assert int(floor.split(".")[0]) >= 5, f"textual>={floor} lacks Markdown.get_stream"
