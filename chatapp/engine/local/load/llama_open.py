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
    Where exact batches apply (exact_attention), attention runs as flash attention over a
    Q8_0 K cache (make_exact); a model llama.cpp cannot run so is opened as it would be
    without. The
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
                exact = {"flash_attn": True, "type_k": llama_cpp.GGML_TYPE_Q8_0}
                return llama_cpp.Llama(**{**kwargs, **exact})
            except ValueError:  # (no context: flash attention or a quantized V cache refused)
                pass
        return llama_cpp.Llama(**kwargs)


def exact_attention(options: LoadOptions, offload: bool) -> bool:
    """Whether to open the context with exact batches: asked for (`exact_batches` true, or
    left open with a draft model loaded beside it: that model drafts every reply it is asked
    for) and possible (exact_batches_possible).

    Left open without a draft model, the worker turns them on when a reply first asks for
    drafts (LoadedModel.make_exact)."""
    wanted = options.exact_batches or (options.exact_batches is None and bool(options.draft_model))
    return bool(wanted) and exact_batches_possible(options, offload)


def make_exact(params) -> None:
    """Set llama_context_params for exact batches: flash attention over a Q8_0 K cache."""
    import llama_cpp

    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    params.type_k = llama_cpp.GGML_TYPE_Q8_0


def is_exact(params) -> bool:
    """Whether llama_context_params are those make_exact (or open_llama's exact try) sets."""
    import llama_cpp

    return (
        params.type_k == llama_cpp.GGML_TYPE_Q8_0
        and params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    )


# Weight types whose products llama.cpp's CPU computes alike for a batch's rows and for one
# token (integer block sums; measured bit for bit on the bundled model quantized to each:
# docs/speed.md). F16, BF16 and the k- and i-quants sum a batch in another order.
EXACT_WEIGHTS = frozenset({"F32", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"})


def inexact_weights(path: str) -> str:
    """The first weight type in the file that batches compute in another order than one token
    ("" when there is none, or the header cannot be read: llama.cpp says what is wrong)."""
    from chatapp.errors import ModelFileError
    from chatapp.gguf.header import read_header

    try:
        tensors = read_header(path).tensors
    except (OSError, ModelFileError):
        return ""
    for t in tensors:
        if t.type_name not in EXACT_WEIGHTS:
            return t.type_name
    return ""


def remake_context(llama, change) -> bool:
    """Replace the Llama's context by one made with `change(params)` applied to the loaded
    parameters (n_seq_max and kv_unified included), the model staying loaded; where llama.cpp
    refuses those, one made as before, and False."""
    import ctypes

    from llama_cpp import _internals

    params = llama.context_params
    before = type(params)()
    size = ctypes.sizeof(params)
    ctypes.memmove(ctypes.byref(before), ctypes.byref(params), size)
    change(params)
    llama._ctx.close()  # first: two KV caches at once may not fit
    try:
        llama._ctx = _internals.LlamaContext(model=llama._model, params=params)
        return True
    except ValueError:
        ctypes.memmove(ctypes.byref(params), ctypes.byref(before), size)
        llama._ctx = _internals.LlamaContext(model=llama._model, params=params)
        return False


def exact_batches_possible(options: LoadOptions, offload: bool) -> bool:
    """Whether attention can run where a batch's rows come out bit for bit as one-token
    decodes give them, so that a reply verified in batches (speculative decoding) is the reply
    decoded one token at a time, whatever the thread count: on the CPU (no layer offloaded),
    unless the user turned flash attention or exact batches off.

    llama.cpp's CPU kernels differ there otherwise. Without flash attention, a batch's
    attention products go through llamafile's tinyBLAS and one token's through ggml's vec_dot:
    they sum in other orders, and where the ~1e-7 difference moves a Q8_1 rounding of the next
    matmul's input, logits move by up to ~1.2 (measured on the bundled model). With flash
    attention over an F16 (or F32) cache, one token's attention is split over the threads
    along the KV once it holds 512 cells (the sum then depends on the thread count), while a
    batch's rows each run the whole KV in one thread (tiled from 64 rows). With a quantized K
    cache flash attention takes neither path: every row, alone or in a batch of any size, runs
    the same code in the same order (prefill's attention too: it is not tiled then). A Q8_0 K
    cache costs less than a Q8_0 V cache there (the V rows stay F16: docs/speed.md).

    The weights' products must agree too (EXACT_WEIGHTS): files with k-quant or F16 tensors
    (Q4_K_M, Q2_K, F16) part by up to ~1.9 in a logit even so."""
    return not inexact_reason(options, offload)


def inexact_reason(options: LoadOptions, offload: bool) -> str:
    """Why a drafted reply cannot be made exact here ("" when it can), as the end of a
    sentence: "the file has Q6_K weights"."""
    if options.exact_batches is False:
        return "exact_batches is false"
    if options.n_gpu_layers != 0 and offload:
        return "layers run on the GPU"
    if options.flash_attn is False:
        return "flash attention is off"
    weights = inexact_weights(options.model_path)
    return f"the file has {weights} weights" if weights else ""


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
