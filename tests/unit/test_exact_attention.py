"""Where attention runs exactly (a batch's rows as one-token decodes), and a model that cannot."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from chatapp.engine.local.load import llama_open
from chatapp.engine.local.load.llama_open import (
    exact_attention,
    exact_batches_possible,
    inexact_reason,
    open_llama,
)
from chatapp.engine.protocol import LoadOptions


@pytest.fixture(autouse=True)
def exact_weights(monkeypatch):
    """The options below name no real file: its weights are taken for exact ones."""
    monkeypatch.setattr(llama_open, "inexact_weights", lambda path: "")


def test_exact_attention_is_the_cpus_unless_flash_attention_or_it_is_turned_off():
    cpu = LoadOptions("m.gguf", n_gpu_layers=0, exact_batches=True)
    assert exact_attention(cpu, offload=True)
    everywhere = LoadOptions("m.gguf", exact_batches=True)
    assert exact_attention(everywhere, offload=False)  # a build without a GPU
    assert not exact_attention(everywhere, offload=True)  # layers on the GPU
    no_fa = LoadOptions("m.gguf", n_gpu_layers=0, flash_attn=False, exact_batches=True)
    assert not exact_attention(no_fa, True)
    assert not exact_batches_possible(no_fa, True)


def test_left_open_exact_batches_come_with_drafts():
    """Left open, a load is exact with a draft model beside it; without one it is not, but
    can be made so when a reply first drafts; turned off, never."""
    open_ = LoadOptions("m.gguf", n_gpu_layers=0)
    assert open_.exact_batches is None
    assert not exact_attention(open_, True)
    assert exact_batches_possible(open_, True)
    with_draft = LoadOptions("m.gguf", n_gpu_layers=0, draft_model="d.gguf")
    assert exact_attention(with_draft, True)
    off = LoadOptions("m.gguf", n_gpu_layers=0, draft_model="d.gguf", exact_batches=False)
    assert not exact_attention(off, True)
    assert not exact_batches_possible(off, True)


def test_a_model_that_refuses_it_opens_as_it_would_without(monkeypatch, model_path):
    import llama_cpp

    calls = []

    def fake_llama(**kwargs):
        calls.append(kwargs)
        if "type_k" in kwargs:  # as llama.cpp makes no context: ValueError
            raise ValueError("Failed to create llama_context")
        return "opened"

    monkeypatch.setattr(llama_cpp, "Llama", fake_llama)
    monkeypatch.setattr(llama_open, "gpu_offload", lambda: False)
    assert (
        open_llama(LoadOptions(model_path, n_gpu_layers=0, exact_batches=True), verbose=False)
        == "opened"
    )
    exact, plain = calls
    assert exact["flash_attn"] and exact["type_k"] == llama_cpp.GGML_TYPE_Q8_0
    assert not plain["flash_attn"] and "type_k" not in plain


def test_weights_that_batches_sum_in_another_order_are_named(monkeypatch, model_path, tmp_path):
    monkeypatch.undo()  # the real header reader
    assert llama_open.inexact_weights(model_path) == ""  # the bundled Q4_1 (and F32 norms)
    assert exact_batches_possible(LoadOptions(model_path, n_gpu_layers=0), offload=True)
    kquant = _gguf(tmp_path / "k.gguf", gguf.GGMLQuantizationType.Q6_K, 210)
    assert llama_open.inexact_weights(str(kquant)) == "Q6_K"
    options = LoadOptions(str(kquant), n_gpu_layers=0, exact_batches=True)
    assert not exact_attention(options, offload=True)
    assert inexact_reason(options, True) == "the file has Q6_K weights"
    assert inexact_reason(LoadOptions(model_path, exact_batches=False), True) == (
        "exact_batches is false"
    )
    assert llama_open.inexact_weights(str(tmp_path / "missing.gguf")) == ""


def _gguf(path, kind, block_bytes: int):
    """A GGUF file with one 256-element tensor of `kind` (one block of `block_bytes`)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", np.zeros(block_bytes, dtype=np.uint8), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
