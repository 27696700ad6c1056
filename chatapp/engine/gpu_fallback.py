"""Load with GPU offload, stepping down the layer count when a load fails; remember what worked."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from chatapp import paths
from chatapp.engine.protocol import EngineError, LoadOptions, ModelInfo

MEMORY_FILE = "gpu-layers.json"


def _memory_path() -> Path:
    return paths.cache_dir() / MEMORY_FILE


def remembered_layers(model_path: str) -> int | None:
    """GPU layers that last loaded this file, if a step-down was ever needed."""
    try:
        value = json.loads(_memory_path().read_text(encoding="utf-8")).get(model_path)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) else None


def remember_layers(model_path: str, layers: int) -> None:
    path = _memory_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    data[model_path] = layers
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    except OSError:
        pass  # best effort: the next load steps down again


def layer_steps(requested: int, n_layers: int) -> list[int]:
    """The GPU layer counts to try, largest first: all, then halving, then CPU only."""
    top = n_layers + 1 if requested < 0 else min(requested, n_layers + 1)
    steps, n = [top], top
    while n > 1:
        n //= 2
        steps.append(n)
    if steps[-1] != 0:
        steps.append(0)
    return steps


def start_with_fallback(
    options: LoadOptions,
    make_engine: Callable[[LoadOptions], object],
    n_layers: int,
) -> tuple[object, ModelInfo, str]:
    """Start an engine; when a load with GPU layers fails, retry with fewer and say so.

    Returns (engine, info, note); note is "" when the first try worked. A file that also fails
    on the CPU raises that error (it is not a memory problem).
    """
    known = remembered_layers(options.model_path)
    if known is not None and options.n_gpu_layers != 0:
        options = replace(options, n_gpu_layers=known)
    if options.n_gpu_layers == 0:
        engine = make_engine(options)
        return engine, engine.start(), ""
    first_error: EngineError | None = None
    last_error: EngineError | None = None
    for layers in layer_steps(options.n_gpu_layers, n_layers):
        engine = make_engine(replace(options, n_gpu_layers=layers))
        try:
            info = engine.start()
        except EngineError as exc:
            first_error = first_error or exc
            last_error = exc
            continue
        if first_error is None:
            return engine, info, ""
        remember_layers(options.model_path, layers)
        note = (
            f"loading with all requested GPU layers failed ({first_error}); "
            f"loaded with {layers} GPU layers instead (remembered for this file)"
        )
        return engine, info, note
    assert last_error is not None
    raise last_error  # it failed on the CPU too: not a memory problem, the CPU error says why
