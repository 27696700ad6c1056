"""The GPU path on a machine with a GPU build of llama.cpp (scripts/gpu_check.sh runs these):
every layer offloaded, the figures the Speed panel and `fit` show, a decode that works. They
skip where llama.cpp has no GPU offload (the CPU build, CI)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ALL_GPU_LAYERS,
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
)
from chatapp.models import fit
from chatapp.sampling import SamplerSettings


@functools.cache
def gpu_offload() -> bool:
    """Asked in a child: llama.cpp is never loaded in the test process itself."""
    code = "import llama_cpp; print(bool(llama_cpp.llama_supports_gpu_offload()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() == "True"


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("not gpu_offload()", reason="llama.cpp is built without GPU offload"),
]


def test_every_layer_goes_to_the_gpu_and_decodes(model_path):
    with LocalEngine(LoadOptions(model_path, n_ctx=2048, n_gpu_layers=ALL_GPU_LAYERS)) as engine:
        info = engine.info
        assert info.gpu_offload_supported
        assert info.n_gpu_layers == info.n_layers + 1  # every block and the output layer
        request = GenerateRequest(
            (ChatMessage("user", "Count to ten."),), SamplerSettings(temperature=0, max_tokens=64)
        )
        finished = [e for e in engine.generate(request) if isinstance(e, Finished)][0]
        assert finished.stats.completion_tokens > 8 and finished.stats.decode_tps > 0


def test_fit_sees_the_gpu_memory():
    gpus = fit.gpu_memory()
    assert gpus and all(g.total_bytes >= g.free_bytes > 0 for g in gpus)


def test_ask_json_reports_the_gpu_layers(model_path):
    r = subprocess.run(
        [sys.executable, "-m", "chatapp.cli", "ask", "Hi.", "-m", model_path, "--ngl", "-1",
         "--max-tokens", "8", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["settings"]["n_gpu_layers"] > 0, data["settings"]
