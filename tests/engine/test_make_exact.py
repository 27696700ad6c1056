"""Exact batches made mid-session (LoadedModel.make_exact) on the real model: the same load, a
new context; where llama.cpp refuses it, the context as before, and why."""

from __future__ import annotations

from dataclasses import replace

from chatapp.engine.local.load import cpu_backend, llama_open
from chatapp.engine.protocol import LoadOptions


def _loaded(model_path):
    from chatapp.engine.local.load.loaded_model import LoadedModel

    options, _ = cpu_backend.choose(
        LoadOptions(model_path, n_ctx=256, n_gpu_layers=0, n_threads=2, flash_attn=None)
    )
    return LoadedModel(replace(options, adapt_threads=True))


def _greedy(w, prompt: list[int], n: int) -> list[int]:
    w.reuse_prefix([-1])  # a fresh cache
    assert w.decode(prompt) == 0
    out = []
    for _ in range(n):
        out.append(int(w.logits(-1).argmax()))
        assert w.decode_one(out[-1]) == 0
    return out


def test_exact_batches_are_made_on_the_loaded_model(model_path, engine):
    w = _loaded(model_path)
    assert w.exact_blocker() == "" and not w.info.exact_batches  # (it can be made exact)
    prompt = w.tokenize("The capital of France is", add_bos=w.add_bos)
    guard = w.guard
    assert w.make_exact()
    import llama_cpp

    params = w.llama.context_params
    assert params.type_k == llama_cpp.GGML_TYPE_Q8_0
    assert params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert w.info.exact_batches and w.options.exact_batches and w.exact_blocker() == ""
    assert w.governor is not None and w.guard is not None and w.guard is not guard  # (new ctx)
    assert len(_greedy(w, prompt, 8)) == 8
    w.reconfigure(False, 2)  # the tune's choice: flash attention stays on under exact batches
    assert w.info.flash_attn and w.info.exact_batches


def test_a_context_llama_cpp_refuses_leaves_the_one_before_and_says_why(
    model_path, engine, monkeypatch
):
    import llama_cpp

    def refused(params) -> None:  # a quantized V cache without flash attention: no context
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.type_v = llama_cpp.GGML_TYPE_Q8_0

    w = _loaded(model_path)
    prompt = w.tokenize("The capital of France is", add_bos=w.add_bos)
    before = _greedy(w, prompt, 8)
    guard = w.guard
    monkeypatch.setattr(llama_open, "make_exact", refused)
    assert not w.make_exact()
    assert not w.info.exact_batches
    assert w.exact_blocker() == "llama.cpp refused flash attention over a Q8_0 K cache here"
    assert w.llama.context_params.type_v == llama_cpp.GGML_TYPE_F16
    assert w.guard is not None and w.guard is not guard  # (on the context made anew)
    assert _greedy(w, prompt, 8) == before  # the context as before, working
