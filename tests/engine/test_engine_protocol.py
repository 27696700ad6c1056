"""The engines and the tests' fakes keep the Engine protocol (names and parameters)."""

from __future__ import annotations

import inspect

import pytest
from fakes.engines import BrokenEngine, FakeEngine, HostileEngine, ScriptedEngine

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import Engine
from chatapp.engine.remote.client import RemoteEngine

MEMBERS = [
    name
    for name in dir(Engine)
    if not name.startswith("_") and (callable(getattr(Engine, name)) or name == "alive")
]
ATTRIBUTES = list(Engine.__annotations__)  # info, notes


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()][1:]


def test_the_protocol_names_what_the_app_and_commands_call():
    assert {"alive", "kill", "count_tokens", "tokenize", "generate", "cancel"} <= set(MEMBERS)
    assert set(ATTRIBUTES) == {"info", "notes"}


def _full_fakes():
    return [ScriptedEngine, HostileEngine]


@pytest.mark.parametrize(
    "cls", [LocalEngine, RemoteEngine, *_full_fakes()], ids=lambda c: c.__name__
)
def test_engines_and_full_fakes_have_every_member_with_the_protocols_parameters(cls):
    for name in MEMBERS:
        ours, theirs = getattr(Engine, name), getattr(cls, name, None)
        assert theirs is not None, f"{cls.__name__} lacks {name}"
        if name == "alive":
            continue  # a property, or a plain attribute in the fakes
        assert _params(theirs) == _params(ours), f"{cls.__name__}.{name}"


def test_engines_set_info_and_notes_when_built(tmp_path):
    from chatapp.engine.protocol import LoadOptions

    for engine in (
        LocalEngine(LoadOptions(model_path=str(tmp_path / "m.gguf"))),
        RemoteEngine("http://127.0.0.1:9"),
        ScriptedEngine(),
    ):
        assert engine.info is None and engine.notes == []
        assert engine.alive is False


def test_partial_fakes_only_have_members_with_the_real_engines_parameters():
    # Fakes of the local engine for compare/picker tests implement only what those use.

    for fake in (FakeEngine, BrokenEngine):
        for name, member in vars(fake).items():
            if name.startswith("_") or not callable(member):
                continue
            real = getattr(LocalEngine, name)
            assert _params(member) == _params(real), f"{fake.__name__}.{name}"
