"""The house's rules (scripts/check_house.py) hold over chatapp/, and the checker sees breaks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checker():
    spec = importlib.util.spec_from_file_location("check_house", ROOT / "scripts/check_house.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_house"] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


def test_chatapp_keeps_the_house_rules():
    breaks = _checker().check(ROOT)
    assert not breaks, "\n".join(map(str, breaks))


def test_the_checker_finds_each_kind_of_break(tmp_path):
    checker = _checker()
    (tmp_path / "chatapp" / "ui").mkdir(parents=True)
    (tmp_path / "chatapp" / "engine" / "remote").mkdir(parents=True)
    long_body = "\n".join(f"    x{i} = {i}" for i in range(61))
    methods = "\n".join(f"    def m{i}(self):\n        pass" for i in range(31))
    (tmp_path / "chatapp" / "ui" / "bad.py").write_text(
        f'"""Bad."""\n\n\ndef long():\n{long_body}\n\n\nclass Wide:\n{methods}\n\n\n'
        "def probe(engine, slot):\n"
        '    return hasattr(engine, "residuals") or callable(getattr(slot.engine, "x", None))\n'
        + "\n"
        * 300
    )
    (tmp_path / "chatapp" / "engine" / "remote" / "stream.py").write_text(
        'def body(kind):\n    return kind == "vllm" or kind in ("llama-server",)\n'
    )
    (tmp_path / "chatapp" / "engine" / "remote" / "flavours.py").write_text(
        'def body(kind):\n    return kind == "vllm"\n'
    )
    found = [str(b) for b in checker.check(tmp_path)]
    bad, stream = "chatapp/ui/bad.py", "chatapp/engine/remote/stream.py"
    assert any(f.startswith(f"{bad}:1: module of") for f in found), found
    assert any("function long of 62 lines" in f for f in found), found
    assert any("class Wide with 31 methods" in f for f in found), found
    assert sum("probes an engine" in f for f in found) == 3, found  # hasattr, callable, getattr
    assert sum(f.startswith(stream) for f in found) == 2, found  # flavours.py is the table
    assert not any("flavours.py" in f for f in found)
