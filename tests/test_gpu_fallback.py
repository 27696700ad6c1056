"""GPU offload step-down: a failed load with GPU layers retries with fewer, says so, remembers."""

from __future__ import annotations

import pytest

from chatapp.engine.local import gpu_fallback
from chatapp.engine.local.engine import LocalEngine
from chatapp.engine.protocol import EngineError, LoadOptions, ModelInfo


class OutOfGpuMemory(LocalEngine):
    """The real start() over a worker that fails to load with more than `fits` GPU layers,
    like an out-of-memory GPU."""

    def __init__(self, options: LoadOptions, fits: int = 8) -> None:
        super().__init__(options)
        self.fits = fits
        self.tried: list[int] = []

    def _spawn(self, options: LoadOptions):
        self.tried.append(options.n_gpu_layers)
        n = options.n_gpu_layers
        if n < 0 or n > self.fits:
            raise EngineError("could not load m.gguf: failed to allocate CUDA0 buffer")
        return ModelInfo(options.model_path, 49152, 512, 8192, 0.1, True, n, 30, 2, True)


def test_layer_steps_halve_down_to_cpu():
    assert gpu_fallback.layer_steps(-1, 30) == [31, 15, 7, 3, 1, 0]
    assert gpu_fallback.layer_steps(10, 30) == [10, 5, 2, 1, 0]


def test_steps_down_says_so_and_remembers(model_path, fresh_dirs):
    opts = LoadOptions(model_path=model_path, n_gpu_layers=-1)
    engine = OutOfGpuMemory(opts)
    assert engine.start().n_gpu_layers == 7
    assert engine.tried == [31, 15, 7]
    (note,) = engine.notes
    assert "loaded with 7 GPU layers instead" in note and "CUDA0" in note
    assert gpu_fallback.remembered_layers(model_path) == 7
    again = OutOfGpuMemory(opts)
    assert again.start().n_gpu_layers == 7
    assert again.tried == [7] and again.notes == [], "the next load starts from what worked"


def test_a_file_that_fails_on_the_cpu_too_raises_the_cpu_error(model_path, fresh_dirs):
    engine = OutOfGpuMemory(LoadOptions(model_path=model_path, n_gpu_layers=4), fits=-1)
    with pytest.raises(EngineError, match="failed to allocate"):
        engine.start()
    assert engine.tried == [4, 2, 1, 0]


@pytest.mark.slow
def test_real_engine_on_a_cpu_build_loads_first_time(model_path, fresh_dirs):
    engine = LocalEngine(LoadOptions(model_path=model_path, n_ctx=256, n_gpu_layers=-1))
    try:
        info = engine.start()
        # No GPU step-down (a CPU build has nothing to step down from); a CPU whose AMX path
        # crashes adds the extra-buffer fallback's notice, which is not this test's business.
        assert not [n for n in engine.notes if "GPU layers" in n] and info.n_vocab == 49152
    finally:
        engine.close()
