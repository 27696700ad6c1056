"""GPU offload step-down: a failed load with GPU layers retries with fewer, says so, remembers."""

from __future__ import annotations

import pytest

from chatapp.engine import gpu_fallback
from chatapp.engine.local import LocalEngine
from chatapp.engine.protocol import EngineError, LoadOptions


class FakeGpuEngine:
    """Fails to load with more than `fits` GPU layers, like an out-of-memory GPU."""

    tried: list[int] = []

    def __init__(self, options: LoadOptions, fits: int = 8) -> None:
        self.options = options
        self.fits = fits

    def start(self):
        FakeGpuEngine.tried.append(self.options.n_gpu_layers)
        n = self.options.n_gpu_layers
        if n < 0 or n > self.fits:
            raise EngineError("could not load m.gguf: failed to allocate CUDA0 buffer")
        return f"info:{n}"


def test_layer_steps_halve_down_to_cpu():
    assert gpu_fallback.layer_steps(-1, 30) == [31, 15, 7, 3, 1, 0]
    assert gpu_fallback.layer_steps(10, 30) == [10, 5, 2, 1, 0]


def test_steps_down_says_so_and_remembers():
    FakeGpuEngine.tried = []
    opts = LoadOptions(model_path="/models/m.gguf", n_gpu_layers=-1)
    engine, info, note = gpu_fallback.start_with_fallback(opts, FakeGpuEngine, 30)
    assert FakeGpuEngine.tried == [31, 15, 7]
    assert info == "info:7" and engine.options.n_gpu_layers == 7
    assert "loaded with 7 GPU layers instead" in note and "CUDA0" in note
    assert gpu_fallback.remembered_layers("/models/m.gguf") == 7
    FakeGpuEngine.tried = []
    _, info, note = gpu_fallback.start_with_fallback(opts, FakeGpuEngine, 30)
    assert FakeGpuEngine.tried == [7] and note == "", "the next load starts from what worked"


def test_a_file_that_fails_on_the_cpu_too_raises_the_cpu_error():
    opts = LoadOptions(model_path="/models/bad.gguf", n_gpu_layers=4)
    with pytest.raises(EngineError, match="failed to allocate"):
        gpu_fallback.start_with_fallback(opts, lambda o: FakeGpuEngine(o, fits=-1), 30)


def test_real_engine_on_a_cpu_build_loads_first_time(model_path):
    opts = LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=-1)
    engine, info, note = gpu_fallback.start_with_fallback(opts, LocalEngine, 30)
    try:
        assert note == "" and info.n_vocab == 49152
    finally:
        engine.close()
