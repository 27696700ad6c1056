"""How often a streaming reply is drawn, chosen from where the model runs."""

from __future__ import annotations

from chatapp.engine.protocol import ModelInfo
from chatapp.ui.streaming import LIGHT, SMOOTH, cadence_for


def _info(n_threads: int, n_gpu_layers: int, n_layers: int = 30) -> ModelInfo:
    return ModelInfo(
        path="m.gguf",
        n_vocab=100,
        n_ctx=2048,
        n_ctx_train=2048,
        load_s=0.1,
        gpu_offload_supported=n_gpu_layers > 0,
        n_gpu_layers=n_gpu_layers,
        n_layers=n_layers,
        n_threads=n_threads,
        has_chat_template=True,
    )


def test_a_model_filling_every_core_gets_fewer_frames():
    assert cadence_for(_info(n_threads=2, n_gpu_layers=0), cores=2) == LIGHT
    assert LIGHT.text_s > SMOOTH.text_s and LIGHT.panels_s > SMOOTH.panels_s


def test_a_core_left_for_the_ui_keeps_the_smooth_stream():
    assert cadence_for(_info(n_threads=3, n_gpu_layers=0), cores=4) == SMOOTH


def test_a_fully_offloaded_model_or_a_server_keeps_the_smooth_stream():
    assert cadence_for(_info(n_threads=2, n_gpu_layers=31), cores=2) == SMOOTH
    assert cadence_for(_info(n_threads=0, n_gpu_layers=0, n_layers=0), cores=2) == SMOOTH
    assert cadence_for(None, cores=2) == SMOOTH


def test_partial_offload_still_runs_on_the_cpu():
    assert cadence_for(_info(n_threads=2, n_gpu_layers=10), cores=2) == LIGHT
