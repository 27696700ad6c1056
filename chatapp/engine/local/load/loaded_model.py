"""The loaded model in the worker process: the Llama, its vocabulary, the KV cache, the prompt."""

from __future__ import annotations

import ctypes
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from chatapp.cpu_load import LoadWatch
from chatapp.engine.local.load import chat_template, huge_pages, llama_open
from chatapp.engine.local.load.cpu_backend import inject_cpu_fault
from chatapp.engine.local.load.llama_open import fill_batch, open_llama
from chatapp.engine.local.load.stall_guard import StallGuard
from chatapp.engine.local.load.thread_governor import ThreadGovernor
from chatapp.engine.local.load.timebound import call_with_timeout
from chatapp.engine.local.load.worker_log import (
    extra_buffers_from_log,
    flash_attn_from_log,
    offloaded_from_log,
)
from chatapp.engine.protocol import (
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    TokenPiece,
    resolved_gpu_layers,
)
from chatapp.gguf.header import quant_name

TEMPLATE_TIMEOUT_S = 2.0
FOLDED_SYSTEM_NOTE = (
    "the model's chat template has no system role; the system prompt goes at the start of the "
    "first user message"
)


class LoadedModel:
    """A loaded model plus the KV-cache state of the last reply."""

    def __init__(self, options: LoadOptions) -> None:
        import llama_cpp  # imported here: the parent process never loads llama.cpp

        self.lib = llama_cpp
        t0 = time.perf_counter()
        self.llama = open_llama(options, verbose=True)
        load_s = time.perf_counter() - t0
        self.options = options
        self.ctx = self.llama._ctx.ctx
        self.model = self.llama._model.model
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_batch = options.n_batch
        self.n_seq_max = llama_cpp.llama_n_seq_max(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        b = self.batch  # its arrays, fetched once: each `b.token` access builds a new pointer
        self._one = (b.token, b.pos, b.n_seq_id, b.seq_id[0], b.logits)
        self.kv_tokens: list[int] = []
        self.replies = 0
        self._pieces: dict[int, bytes] = {}
        self._special: dict[int, bool] = {}
        self._special_attrs = (
            llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
            | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
            | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        )
        self._logit_views: dict[int, np.ndarray] = {}
        self._eog: list[int] | None = None
        meta = self.llama.metadata
        self.chat_template = options.chat_template or meta.get("tokenizer.chat_template", "")
        self.noted: set[str] = set()  # notices said once per loaded model (FOLDED_SYSTEM_NOTE)
        self.batch_costs: dict[int, float] = {}  # rows -> seconds a batch takes (speculation)
        self.autotune_status: dict | None = None  # the tune on first use (autotune.py), if any
        self.bos_id = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos_id = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        n_layers = llama_cpp.llama_model_n_layer(self.model)
        gpu_ok = bool(llama_cpp.llama_supports_gpu_offload())
        offloaded = _offloaded_layers(gpu_ok, options.n_gpu_layers, n_layers)
        self._watch: LoadWatch | None = None
        self.guard: StallGuard | None = None
        self.governor = self._governor(options.threads, options.adapt_threads, offloaded < n_layers)
        self.info = self._model_info(load_s, gpu_ok, offloaded, n_layers)
        self.loaded_as = options  # (before the tune or exact batches change them)
        self._exact_blocker: str | None = None  # exact_blocker(), read when first asked

    def _model_info(self, load_s: float, gpu_ok: bool, offloaded: int, n_layers: int) -> ModelInfo:
        """What the parent is told of the model just loaded."""
        llama_cpp, options, meta = self.lib, self.options, self.llama.metadata
        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, desc, 256)
        exact = llama_open.is_exact(self.llama.context_params)
        return ModelInfo(
            path=options.model_path,
            n_vocab=self.n_vocab,
            n_ctx=self.n_ctx,
            n_ctx_train=llama_cpp.llama_model_n_ctx_train(self.model),
            load_s=load_s,
            gpu_offload_supported=gpu_ok,
            n_gpu_layers=offloaded,
            n_layers=n_layers,
            n_threads=options.threads,
            has_chat_template=bool(self.chat_template),
            description=desc.value.decode("utf-8", "replace"),
            size_bytes=Path(options.model_path).stat().st_size,
            architecture=meta.get("general.architecture", ""),
            quant=quant_name(meta.get("general.file_type"), options.model_path),
            n_params=int(llama_cpp.llama_model_n_params(self.model)),
            flash_attn=bool(options.flash_attn) or exact,
            repack=options.repack is not False,
            huge_pages=huge_pages.in_use(),
            weights_in_memory=self.llama.model_params.load_mode == llama_cpp.LLAMA_LOAD_MODE_NONE,
            n_embd=llama_cpp.llama_model_n_embd(self.model),
            exact_batches=exact,
        )

    def _governor(self, most: int, adapt: bool, cpu_bound: bool) -> ThreadGovernor | None:
        """The live thread count's keeper, where the CPU runs (some of) the model with more
        than one thread and the user did not pin the count."""
        if not adapt or most < 2 or not cpu_bound:
            return None
        watch = self._load_watch()
        if self.guard is not None:
            self.guard.close()
        self.guard = StallGuard(self.lib, self.ctx)  # (on this context: made anew with it)
        return ThreadGovernor(
            most,
            lambda n: self.lib.llama_set_n_threads(self.ctx, n, n),
            lambda n: self.lib.llama_set_n_threads(self.ctx, most, n),
            watch,
            others_now=watch.fresh,
        )

    def _load_watch(self) -> LoadWatch:
        """One background reader of the other programs' CPU use for the model's life (the
        governor is made anew when the tune changes the count)."""
        if self._watch is None:
            self._watch = LoadWatch(children=False)
        return self._watch

    def warm_up(self) -> int:
        """Run the backend once, as llama.cpp's own tools do, so a backend that crashes on this
        CPU does it now (the engine can then retry without it) and not on the first reply."""
        inject_cpu_fault(self.options, "warm_up")
        tok = self.bos_id if self.bos_id >= 0 else max(self.eos_id, 0)
        code = self.decode([tok, tok]) or self.decode_one(tok)
        self.lib.llama_memory_clear(self.mem, True)
        self.kv_tokens = []
        return code

    def reconfigure(self, flash_attn: bool, threads: int) -> None:
        """Run on with other context settings, the model staying loaded: threads are set on the
        context; flash attention needs a new context (the KV cache starts empty). Exact
        batches keep it on."""
        lib = self.lib
        flash_attn = bool(flash_attn) or self.info.exact_batches
        if flash_attn != bool(self.info.flash_attn):
            on, off = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED, lib.LLAMA_FLASH_ATTN_TYPE_DISABLED

            def attention(params) -> None:
                params.flash_attn_type = on if flash_attn else off
                params.n_threads = params.n_threads_batch = threads

            if not self._new_context(attention):
                flash_attn = self.info.flash_attn
        self._use_threads(threads)  # the tune's best is the new quiet-machine count
        self.options = replace(self.options, flash_attn=bool(flash_attn), n_threads=threads)
        self.info = replace(self.info, flash_attn=bool(flash_attn), n_threads=threads, tuned=True)

    def make_exact(self) -> bool:
        """Exact batches from now on (a reply asks for drafts and `exact_batches` was left
        open): a new context with flash attention over a Q8_0 K cache, so the KV cache starts
        empty. False where llama.cpp refuses it (a context as before, and exact_blocker()
        says so)."""
        made = self._new_context(llama_open.make_exact)
        self._use_threads(self.options.threads)
        if not made:
            self._exact_blocker = "llama.cpp refused flash attention over a Q8_0 K cache here"
            return False
        self.options = replace(self.options, flash_attn=True, exact_batches=True)
        self.info = replace(self.info, flash_attn=True, exact_batches=True)
        return True

    def exact_blocker(self) -> str:
        """Why drafts cannot be exact here ("" if they can): read when first asked, not at load."""
        if self.info.exact_batches:
            return ""
        if self._exact_blocker is None:
            gpu = self.info.gpu_offload_supported
            self._exact_blocker = llama_open.inexact_reason(self.loaded_as, gpu)
        return self._exact_blocker

    def _use_threads(self, threads: int) -> None:
        """The context's thread count, and a governor from it (its guard on this context)."""
        self.lib.llama_set_n_threads(self.ctx, threads, threads)
        if self.governor is not None:
            self.governor = self._governor(threads, True, True)

    def _new_context(self, change) -> bool:
        """A new context made with `change(params)` (llama_open.remake_context), in use."""
        made = llama_open.remake_context(self.llama, change)
        self.ctx = self.llama._ctx.ctx
        self.mem = self.lib.llama_get_memory(self.ctx)
        self.kv_tokens = []
        self._logit_views.clear()
        return made

    def described(self, log_text: str) -> ModelInfo:
        """The load's facts that only llama.cpp's log tells: GPU layers, flash attention as
        resolved, extra CPU buffer types in use."""
        layers = offloaded_from_log(log_text)
        info = replace(
            self.info,
            extra_buffers=extra_buffers_from_log(log_text),
            flash_attn=flash_attn_from_log(log_text, self.info.flash_attn),
        )
        return info if layers is None else replace(info, n_gpu_layers=layers)

    # ---- tokens -------------------------------------------------------------------------

    def piece(self, token: int) -> bytes:
        """Exact bytes of one token (special tokens rendered)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(256)  # per call: the side thread decodes too
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, 256, 0, True)
            cached = buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def is_special(self, token: int) -> bool:
        """Whether llama.cpp marks the token special: a control token such as <|im_end|>, a
        user-defined added token such as <|im_start|> in some conversions, or the unknown one
        (the kinds llama.cpp itself matches as specials when it tokenizes)."""
        cached = self._special.get(token)
        if cached is None:
            attr = self.lib.llama_vocab_get_attr(self.vocab, token)
            cached = bool(attr & self._special_attrs)
            self._special[token] = cached
        return cached

    def pieces(self, tokens: list[int]) -> list[TokenPiece]:
        """Each token's exact bytes and whether it is special, as the parent is told them."""
        return [TokenPiece(t, self.piece(t), self.is_special(t)) for t in tokens]

    def tokenize(self, text: str, add_bos: bool, special: bool = True) -> list[int]:
        data = text.encode("utf-8", errors="surrogatepass").replace(b"\x00", b"")
        data = data.decode("utf-8", errors="replace").encode("utf-8")
        cap = len(data) + 8
        buf = (self.lib.llama_token * cap)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (self.lib.llama_token * cap)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        ids = list(buf[:n])
        if add_bos and len(ids) > 1 and ids[0] == ids[1] == self.bos_id:
            ids = ids[1:]  # the template already wrote a BOS
        return ids

    def eog_tokens(self) -> list[int]:
        if self._eog is None:
            self._eog = [
                t for t in range(self.n_vocab) if self.lib.llama_vocab_is_eog(self.vocab, t)
            ]
        return self._eog

    # ---- decoding -----------------------------------------------------------------------

    def decode(self, tokens: list[int], logits_all: bool = False, progress=None) -> int:
        """Evaluate tokens after the cached ones; returns llama_decode's code (0 = ok).
        `progress(done)` is called after each batch."""
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            b = self.batch
            fill_batch(b, chunk, len(self.kv_tokens), logits_all)
            code = self.lib.llama_decode(self.ctx, b)
            if code != 0:
                return code
            self.kv_tokens.extend(chunk)
            if progress is not None:
                progress(start + len(chunk))
        return 0

    def drop_last(self, n: int) -> None:
        """Take the last n tokens out of the KV cache (drafts the model turned down)."""
        if n <= 0:
            return
        keep = len(self.kv_tokens) - n
        if not self.lib.llama_memory_seq_rm(self.mem, -1, keep, -1):
            self.lib.llama_memory_clear(self.mem, True)
            keep = 0
        del self.kv_tokens[keep:]

    def decode_one(self, token: int) -> int:
        tokens, pos, n_seq_id, seq_id, logits = self._one
        tokens[0] = token
        pos[0] = len(self.kv_tokens)
        n_seq_id[0] = 1
        seq_id[0] = 0
        logits[0] = True
        b = self.batch
        b.n_tokens = 1
        guard, gov = self.guard, self.governor  # (one made with the other)
        if guard is None or gov is None:
            code = self.lib.llama_decode(self.ctx, b)
        else:  # a step that stalls is stopped and run again one thread fewer
            code = guard.step(lambda: self.lib.llama_decode(self.ctx, b), gov)
        if code == 0:
            self.kv_tokens.append(token)
        return code

    def logits(self, i: int = -1) -> np.ndarray:
        """A zero-copy view of one output row (views are cached by address: making one
        costs ~50 us, more than the rest of a step's bookkeeping)."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        addr = ctypes.addressof(ptr.contents)
        view = self._logit_views.get(addr)
        if view is None:
            if len(self._logit_views) > 64:
                self._logit_views.clear()
            view = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
            self._logit_views[addr] = view
        return view

    def reuse_prefix(self, tokens: list[int]) -> int:
        """Keep the KV cache for the common prefix; returns how many tokens were kept."""
        n = 0
        limit = min(len(self.kv_tokens), len(tokens) - 1)  # the last token must be evaluated
        while n < limit and self.kv_tokens[n] == tokens[n]:
            n += 1
        if not self.lib.llama_memory_seq_rm(self.mem, -1, n, -1):
            self.lib.llama_memory_clear(self.mem, True)
            n = 0
        del self.kv_tokens[n:]
        return n

    # ---- the prompt ---------------------------------------------------------------------

    def render_prompt(self, req: GenerateRequest) -> tuple[str, str]:
        """Templated prompt text and a warning: empty when the model's template was used as is,
        FOLDED_SYSTEM_NOTE when it was used with the system prompt folded into the user turn,
        else why the plain template was used."""
        if req.raw_prompt is not None:
            return req.raw_prompt, ""
        if self.chat_template:
            try:
                rendered = self._render_bounded(self.chat_template, req)
            except (chat_template.TemplateError, TimeoutError) as exc:
                warning = f"the model's chat template failed ({exc}); using a plain template"
            else:
                return rendered.text, FOLDED_SYSTEM_NOTE if rendered.folded_system else ""
        else:
            warning = "this model has no chat template; using a plain template"
        return chat_template.render_fallback(req.messages), warning

    def _render_bounded(self, source: str, req: GenerateRequest) -> chat_template.Rendered:
        """The model's template, stopped after TEMPLATE_TIMEOUT_S (it comes from the file)."""
        bos = self.piece(self.bos_id).decode("utf-8", "replace") if self.bos_id >= 0 else ""
        eos = self.piece(self.eos_id).decode("utf-8", "replace") if self.eos_id >= 0 else ""
        return call_with_timeout(
            lambda: chat_template.render(
                source,
                req.messages,
                bos_token=bos,
                eos_token=eos,
                enable_thinking=req.enable_thinking,
            ),
            TEMPLATE_TIMEOUT_S,
        )

    # ---- scoring ------------------------------------------------------------------------

    def score(self, tokens: list[int]) -> np.ndarray | str:
        """Log-probabilities (float32, len(tokens)-1 x n_vocab) of each next token of a text."""
        tokens = tokens[: self.n_ctx]
        self.lib.llama_memory_clear(self.mem, True)
        self.kv_tokens = []
        rows = []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            if self.decode(chunk, logits_all=True) != 0:
                return "llama_decode failed while scoring"
            for i in range(len(chunk)):
                row = self.logits(i).astype(np.float64)
                top = row.max()
                rows.append((row - top - np.log(np.exp(row - top).sum())).astype(np.float32))
        self.lib.llama_memory_clear(self.mem, True)
        self.kv_tokens = []
        return np.stack(rows[:-1]) if len(rows) > 1 else np.zeros((0, self.n_vocab), np.float32)


def _offloaded_layers(gpu_ok: bool, requested: int, n_layers: int) -> int:
    if not gpu_ok or requested == 0:
        return 0
    return resolved_gpu_layers(requested, n_layers)
