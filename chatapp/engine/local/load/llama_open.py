"""Opening a llama_cpp.Llama as LoadOptions say (with the two settings Llama() does not take),
and filling a llama_batch with one sequence's tokens."""

from __future__ import annotations

import contextlib
from pathlib import Path

from chatapp.engine.local.load import huge_pages
from chatapp.engine.protocol import LoadOptions
from chatapp.machine import ram_available

PARALLEL_SEQUENCES = 8  # sequences a context holds: the most replies decoded together


def open_llama(options: LoadOptions, verbose: bool):
    """A llama_cpp.Llama as LoadOptions say (also used by the benchmark's reference side).

    Two settings Llama() does not take are set on the params it builds: `use_extra_bufts`
    (repack off) and flash attention "auto" (llama.cpp's own choice, used with GPU layers).
    The weights are read into memory where huge pages make that faster
    (huge_pages.weights_in_memory), else mapped from the file."""
    import llama_cpp

    offload = gpu_offload()
    auto_fa = options.flash_attn is None and options.n_gpu_layers != 0 and offload
    in_memory = huge_pages.weights_in_memory(
        cpu_holds_weights=options.n_gpu_layers == 0 or not offload,
        size=_file_size(options.model_path),
        ram=ram_available(),
    )
    with _load_params(extra_bufts=options.repack is not False, auto_fa=auto_fa):
        return llama_cpp.Llama(
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
