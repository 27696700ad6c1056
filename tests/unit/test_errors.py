"""One family of errors: every error chatapp raises for the user is a ChatappError."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import chatapp.errors
from chatapp.config_state import ConfigError
from chatapp.engine.local.load.chat_template import TemplateError
from chatapp.engine.protocol import EngineCrashed, EngineError
from chatapp.errors import ChatappError, ModelFileError, UsageError
from chatapp.gguf.header import validate
from chatapp.history.records import StoreError
from chatapp.history.store import StoreError as StoreErrorReexported
from chatapp.models.bundled import BundledModelMissing
from chatapp.sampling import SamplerSettings, SettingsError
from chatapp.ui.bench.headless_bench import BenchError
from chatapp.ui.themes import ThemeFileError

FAMILY = [
    UsageError,
    ModelFileError,
    SettingsError,
    ThemeFileError,
    BenchError,
    StoreError,
    ConfigError,
    EngineError,
    EngineCrashed,
    TemplateError,
    BundledModelMissing,
]


@pytest.mark.parametrize("cls", FAMILY, ids=lambda c: c.__name__)
def test_every_error_class_is_a_chatapp_error(cls):
    assert issubclass(cls, ChatappError)
    assert issubclass(ChatappError, Exception) and not issubclass(ChatappError, ValueError)


def test_the_kinds_stay_apart():
    assert StoreErrorReexported is StoreError
    assert not issubclass(ModelFileError, EngineError)  # a bad file is not the engine's fault
    assert not issubclass(UsageError, EngineError)
    assert not issubclass(ModelFileError, UsageError)


def test_a_bad_file_and_a_bad_setting_are_caught_as_chatapp_errors(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_text("<html>not found</html>")
    with pytest.raises(ChatappError) as info:
        validate(bad)
    assert type(info.value) is ModelFileError and str(bad) in str(info.value)
    with pytest.raises(ChatappError, match="top_p must be between"):
        SamplerSettings(top_p=2.0)


def test_errors_module_imports_nothing_from_chatapp():
    tree = ast.parse(Path(chatapp.errors.__file__).read_text(encoding="utf-8"))
    imported = [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
    ]
    assert not [n for n in imported if n == "chatapp" or n.startswith("chatapp.")], imported
