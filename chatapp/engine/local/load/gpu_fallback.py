"""GPU offload steps: the layer counts a load tries when one fails, and what worked per file."""

from __future__ import annotations

import re
from pathlib import Path

from chatapp import jsonfile, paths
from chatapp.engine.protocol import EngineError, LoadOptions, resolved_gpu_layers
from chatapp.errors import ModelFileError

MEMORY_FILE = "gpu-layers.json"

# What llama.cpp says when a buffer does not fit, on every backend (its words, from its
# sources): "unable to allocate CUDA0 buffer" (weights, llama-model.cpp), "failed to allocate
# buffer for kv cache" / "compute pp buffers" (llama-kv-cache.cpp, llama-context.cpp), "failed
# to allocate Vulkan0 buffer of size" (ggml-alloc.c; Vulkan's own allocator says nothing),
# "cudaMalloc failed: out of memory" and "CUDA error: out of memory" (ggml-cuda.cu), Metal's
# "failed to allocate buffer, size =" and "(out of memory)", "allocation failed".
_OUT_OF_MEMORY = re.compile(
    r"unable to allocate|failed to allocate|out of memory|cudaMalloc failed|allocation failed"
    r"|OutOfDeviceMemory",
    re.IGNORECASE,
)


def _memory_path() -> Path:
    return paths.cache_dir() / MEMORY_FILE


def remembered_layers(model_path: str) -> int | None:
    """GPU layers that last loaded this file, if a step-down was ever needed."""
    value = jsonfile.read_dict(_memory_path()).get(model_path)
    return value if isinstance(value, int) else None


def remember_layers(model_path: str, layers: int) -> None:
    try:
        jsonfile.update(_memory_path(), lambda data: data.update({model_path: layers}))
    except (OSError, jsonfile.JsonFileError):
        pass  # best effort: the next load steps down again


def layer_steps(requested: int, n_layers: int) -> list[int]:
    """The GPU layer counts to try, largest first: all, then halving, then CPU only."""
    top = resolved_gpu_layers(requested, n_layers)
    steps, n = [top], top
    while n > 1:
        n //= 2
        steps.append(n)
    if steps[-1] != 0:
        steps.append(0)
    return steps


def steps_for(options: LoadOptions) -> list[int]:
    """The GPU layer counts a load tries in turn: the layers asked for (or the count that
    last worked for this file), then halving down to the CPU."""
    if options.n_gpu_layers == 0:
        return [0]
    known = remembered_layers(options.model_path)
    requested = options.n_gpu_layers if known is None else known
    if requested == 0:
        return [0]
    from chatapp.gguf.header import inspect

    try:
        n_layers = inspect(options.model_path).n_layers or 0
    except ModelFileError:
        return [requested]  # the load itself reports the bad file
    return layer_steps(requested, n_layers)


def out_of_memory(reason: str, log_text: str) -> bool:
    """Whether a failed load ran out of (GPU) memory, from its error and the worker's log:
    only then can fewer GPU layers help. Any other refusal (an unknown architecture, a bad
    tensor) fails the same way with every layer count."""
    return bool(_OUT_OF_MEMORY.search(reason) or _OUT_OF_MEMORY.search(log_text))


def step_down_notice(first_error: EngineError, layers: int) -> str:
    return (
        f"loading with all requested GPU layers failed ({first_error}); "
        f"loaded with {layers} GPU layers instead (remembered for this file)"
    )
