"""GPU offload step-down: a failed load with GPU layers retries with fewer, says so, remembers."""

from __future__ import annotations

import pytest
from fakes.gguf_files import build, kv_str, kv_u32, write

from chatapp.engine.local.load import gpu_fallback
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import EngineError, LoadOptions, ModelInfo
from chatapp.gguf.header import read_header


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
    # The bundled model's 30 blocks: 31, 15, 7; the GPU check's cut of it (docs/gpu.md): 5, 2, 1
    steps = gpu_fallback.layer_steps(-1, read_header(model_path).metadata["llama.block_count"])
    opts = LoadOptions(model_path=model_path, n_gpu_layers=-1)
    engine = OutOfGpuMemory(opts, fits=steps[2])
    assert engine.start().n_gpu_layers == steps[2]
    assert engine.tried == steps[:3]
    (note,) = engine.notes
    assert f"loaded with {steps[2]} GPU layers instead" in note and "CUDA0" in note
    assert gpu_fallback.remembered_layers(model_path) == steps[2]
    again = OutOfGpuMemory(opts, fits=steps[2])
    assert again.start().n_gpu_layers == steps[2]
    assert again.tried == [steps[2]] and again.notes == [], "the next load starts from what worked"


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


# What llama.cpp prints when a GPU (or the host) runs out of memory, word for word from its
# sources: src/llama-model.cpp, llama-kv-cache.cpp, llama-context.cpp, ggml-alloc.c,
# ggml-cuda.cu, ggml-metal-device.m, ggml-metal.cpp.
LLAMA_CPP_OUT_OF_MEMORY = [
    "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
    "llama_init_from_model: failed to initialize the context: "
    "failed to allocate buffer for kv cache",
    "llama_init_from_model: failed to initialize the context: "
    "failed to allocate compute pp buffers",
    "ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 292926534144",
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 279356.51 MiB on device 0: "
    "cudaMalloc failed: out of memory",
    "ggml_metal_buffer_type_alloc_buffer: error: failed to allocate buffer, size =  512.00 MiB",
    "ggml_backend_metal_buffer_from_ptr: failed to allocate Metal buffer of 1024 bytes "
    "(out of memory)",
    "CUDA error: out of memory",
]


@pytest.mark.parametrize("line", LLAMA_CPP_OUT_OF_MEMORY)
def test_llama_cpp_memory_failures_are_recognised(line):
    assert gpu_fallback.out_of_memory("could not load m.gguf: Failed to create llama_context", line)


def test_other_load_failures_are_not_memory_failures():
    assert not gpu_fallback.out_of_memory(
        "could not load m.gguf: llama.cpp says: unknown model architecture: 'frobnicator'",
        "llama_model_load: error loading model: unknown model architecture: 'frobnicator'",
    )


class CountedStarts(LocalEngine):
    """The real engine, counting the workers it starts."""

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.tried: list[int] = []

    def _spawn(self, options: LoadOptions):
        self.tried.append(options.n_gpu_layers)
        return super()._spawn(options)


def test_a_file_llama_cpp_refuses_fails_at_once_on_the_default_gpu_layers(tmp_path, fresh_dirs):
    """An unknown architecture is not a memory failure: with --ngl not given (all layers), one
    worker, one error, no step-down through 31, 15, 7... layers."""
    kvs = [kv_str("general.architecture", "frobnicator"), kv_u32("frobnicator.block_count", 30)]
    path = str(write(tmp_path, build(kvs=kvs)))
    assert gpu_fallback.steps_for(LoadOptions(model_path=path)) != [0], "the default offloads"
    engine = CountedStarts(LoadOptions(model_path=path))
    with pytest.raises(EngineError, match="unknown model architecture: 'frobnicator'"):
        engine.start()
    assert len(engine.tried) == 1 and engine.notes == []
    assert gpu_fallback.remembered_layers(path) is None


def test_a_real_worker_that_fails_out_of_memory_steps_down_through_every_count(
    tmp_path, fresh_dirs
):
    """The step-down over real workers: each load that fails with an out-of-memory sentence
    (here llama.cpp naming an architecture called OutOfDeviceMemory) is tried again with fewer
    GPU layers. The load failure used to close the engine, which ended the step-down after
    the first worker."""
    arch = "OutOfDeviceMemory"
    path = str(write(tmp_path, build(kvs=[kv_str("general.architecture", arch)] + [
        kv_u32(f"{arch}.block_count", 30)
    ])))  # fmt: skip
    steps = gpu_fallback.steps_for(LoadOptions(model_path=path))
    assert len(steps) > 1 and gpu_fallback.out_of_memory(f"architecture: '{arch}'", "")
    engine = CountedStarts(LoadOptions(model_path=path))
    with pytest.raises(EngineError, match=f"unknown model architecture: '{arch}'"):
        engine.start()
    assert engine.tried == steps and engine.notes == []
    assert gpu_fallback.remembered_layers(path) is None
