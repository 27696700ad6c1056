"""Opening a llama_cpp.Llama as LoadOptions say (with the two settings Llama() does not take),
and filling a llama_batch with one sequence's tokens."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from chatapp.engine.local.load import huge_pages
from chatapp.engine.protocol import LoadOptions
from chatapp.machine import ram_available

PARALLEL_SEQUENCES = 8  # sequences a context holds: the most replies decoded together


def open_llama(options: LoadOptions, verbose: bool):
    """A llama_cpp.Llama as LoadOptions say (also used by the benchmark's reference side).

    Two settings Llama() does not take are set on the params it builds: `use_extra_bufts`
    (repack off) and flash attention "auto" (llama.cpp's own choice, used with GPU layers).
    Where `exact_batches` applies (exact_attention), attention runs as flash attention over a
    Q8_0 V cache; a model llama.cpp cannot run so is opened as it would be without. The
    weights are read into memory where huge pages make that faster
    (huge_pages.weights_in_memory), else mapped from the file."""
    import llama_cpp

    offload = gpu_offload()
    auto_fa = options.flash_attn is None and options.n_gpu_layers != 0 and offload
    in_memory = huge_pages.weights_in_memory(
        cpu_holds_weights=options.n_gpu_layers == 0 or not offload,
        size=_file_size(options.model_path),
        ram=ram_available(),
    )
    kwargs: dict[str, Any] = dict(
        model_path=options.model_path,
        n_ctx=options.n_ctx,
        n_gpu_layers=options.n_gpu_layers,
        n_threads=options.threads,
        n_threads_batch=options.threads,
        n_batch=options.n_batch,
        n_ubatch=options.n_batch,
        flash_attn=bool(options.flash_attn),
        use_mmap=not in_memory,
        logits_all=False,  # logits of the last token only: all rows would cost every step
        verbose=verbose,  # verbose=False would redirect this process's fds 1/2 while loading
    )
    with _load_params(extra_bufts=options.repack is not False, auto_fa=auto_fa):
        if exact_attention(options, offload):
            try:
                exact = {"flash_attn": True, "type_v": llama_cpp.GGML_TYPE_Q8_0}
                return llama_cpp.Llama(**{**kwargs, **exact})
            except ValueError:  # (no context: flash attention or a quantized V cache refused)
                pass
        return llama_cpp.Llama(**kwargs)


def exact_attention(options: LoadOptions, offload: bool) -> bool:
    """Whether to run attention where a batch's rows come out bit for bit as one-token decodes
    give them, so that a reply verified in batches (speculative decoding) is the reply decoded
    one token at a time, whatever the thread count: on the CPU (no layer offloaded), unless
    the user turned flash attention off or `exact_batches` is off.

    llama.cpp's CPU kernels differ there otherwise. Without flash attention, a batch's
    attention products go through llamafile's tinyBLAS and one token's through ggml's vec_dot:
    they sum in other orders, and where the ~1e-7 difference moves a Q8_1 rounding of the next
    matmul's input, logits move by up to ~0.8. With flash attention over an F16 (or F32) cache,
    one token's attention is split over the threads along the KV once it holds 512 cells
    (the sum then depends on the thread count), while a batch's rows each run the whole KV in
    one thread (tiled from 64 rows). With a quantized V cache flash attention takes neither
    path: every row, alone or in a batch of any size, runs the same code in the same order
    (prefill's attention too: it is not tiled then)."""
    cpu_attention = options.n_gpu_layers == 0 or not offload
    return options.exact_batches and cpu_attention and options.flash_attn is not False


def _file_size(path: str) -> int | None:
    try:
        return Path(path).stat().st_size
    except OSError:
        return None  # llama.cpp says what is wrong with it


def gpu_offload() -> bool:
    """Whether this llama.cpp build can offload layers to a GPU."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


@contextlib.contextmanager
def _load_params(extra_bufts: bool, auto_fa: bool):
    """Patch the two param factories Llama() calls, for the length of one load."""
    import llama_cpp
    from llama_cpp import _internals

    model_defaults = llama_cpp.llama_cpp.llama_model_default_params
    context_class = _internals.LlamaContext

    def model_params():
        params = model_defaults()
        params.use_extra_bufts = extra_bufts
        return params

    def context(*args, **kwargs):
        params = kwargs["params"]
        if auto_fa:
            params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        # Room for parallel sequences ("regenerate x N"), all in one KV buffer so each can
        # use the whole context and share the prompt's cells.
        params.n_seq_max = PARALLEL_SEQUENCES
        params.kv_unified = True
        return context_class(*args, **kwargs)

    llama_cpp.llama_cpp.llama_model_default_params = model_params
    _internals.LlamaContext = context  # type: ignore[misc, assignment]  # (put back below)
    try:
        yield
    finally:
        llama_cpp.llama_cpp.llama_model_default_params = model_defaults
        _internals.LlamaContext = context_class  # type: ignore[misc]


def fill_batch(b, tokens: list[int], n_past: int, logits_all: bool = False) -> None:
    """One sequence's tokens at positions n_past.. into a llama_batch; logits for the last
    token (for every token with logits_all)."""
    for i, tok in enumerate(tokens):
        b.token[i] = tok
        b.pos[i] = n_past + i
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = logits_all
    b.logits[len(tokens) - 1] = True
    b.n_tokens = len(tokens)
