"""The headless layers never load Textual (nor Rich where nothing is drawn), checked in a fresh
interpreter: importing each package, every module under chatapp.models, and `chatapp --help`."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest
from helpers import REPO

import chatapp.models

# package -> the top-level modules it must never load
HEADLESS = {
    "chatapp.engine": {"textual", "rich"},
    "chatapp.gguf": {"textual", "rich"},
    "chatapp.chat": {"textual"},
    "chatapp.history": {"textual"},
    "chatapp.commands": {"textual"},
    **{
        m.name: {"textual"}
        for m in pkgutil.walk_packages(chatapp.models.__path__, "chatapp.models.")
    },
    "chatapp.models": {"textual"},
}

_LOADED = "import json, sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"


def _loaded_after(code: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-c", f"{code}\n{_LOADED}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", sorted(HEADLESS))
def test_headless_module_loads_no_ui(module):
    loaded = _loaded_after(f"import {module}")
    assert not loaded & HEADLESS[module], f"{module} loads {sorted(loaded & HEADLESS[module])}"


def test_chatapp_help_loads_no_textual():
    code = (
        "import sys\nsys.argv = ['chatapp', '--help']\nfrom chatapp.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )
    loaded = _loaded_after(code)
    assert "textual" not in loaded
