"""Where attention runs exactly (a batch's rows as one-token decodes), and a model that cannot."""

from __future__ import annotations

from chatapp.engine.local.load import llama_open
from chatapp.engine.local.load.llama_open import exact_attention, open_llama
from chatapp.engine.protocol import LoadOptions


def test_exact_attention_is_the_cpus_unless_flash_attention_or_it_is_turned_off():
    cpu = LoadOptions("m.gguf", n_gpu_layers=0, exact_batches=True)
    assert exact_attention(cpu, offload=True)
    everywhere = LoadOptions("m.gguf", exact_batches=True)
    assert exact_attention(everywhere, offload=False)  # a build without a GPU
    assert not exact_attention(everywhere, offload=True)  # layers on the GPU
    no_fa = LoadOptions("m.gguf", n_gpu_layers=0, flash_attn=False, exact_batches=True)
    assert not exact_attention(no_fa, True)
    assert not exact_attention(LoadOptions("m.gguf", n_gpu_layers=0), True)  # off by default


def test_a_model_that_refuses_it_opens_as_it_would_without(monkeypatch, model_path):
    import llama_cpp

    calls = []

    def fake_llama(**kwargs):
        calls.append(kwargs)
        if "type_v" in kwargs:  # as llama.cpp makes no context: ValueError
            raise ValueError("Failed to create llama_context")
        return "opened"

    monkeypatch.setattr(llama_cpp, "Llama", fake_llama)
    monkeypatch.setattr(llama_open, "gpu_offload", lambda: False)
    assert (
        open_llama(LoadOptions(model_path, n_gpu_layers=0, exact_batches=True), verbose=False)
        == "opened"
    )
    exact, plain = calls
    assert exact["flash_attn"] and exact["type_v"] == llama_cpp.GGML_TYPE_Q8_0
    assert not plain["flash_attn"] and "type_v" not in plain
