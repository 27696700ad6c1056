"""The child process: owns the Llama, runs the token loop, answers the parent over pipes."""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import sys
import threading
import time
from collections import Counter, deque
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from chatapp.engine.local import template
from chatapp.engine.local.candidates import rank, ranked_size, token_logprob, top_candidates
from chatapp.engine.local.timebound import call_with_timeout
from chatapp.engine.local.worker_log import (
    extra_buffers_from_log,
    flash_attn_from_log,
    load_error_from_log,
    offloaded_from_log,
    read_since,
)
from chatapp.engine.protocol import (
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    Notice,
    PromptEvaluated,
    SettingsApplied,
    StopReason,
    Token,
    TokenPiece,
)
from chatapp.metrics import stats_from_times
from chatapp.sampling import SamplerSettings

FLUSH_S = 0.025  # token events go at most every 25 ms (the first one at once)
TEMPLATE_TIMEOUT_S = 2.0


def main(
    conn: Connection, side: Connection, options: LoadOptions, log_path: str, nice: int = 0
) -> None:
    """Entry point of the worker process."""
    redirect_output(log_path)
    if nice > 0:
        _lower_priority(nice)
    log_start = os.path.getsize(log_path)
    try:
        worker = Worker(options)
    except Exception as exc:  # noqa: BLE001 - every load failure becomes one message
        reason = _load_error(options.model_path, exc, read_since(log_path, log_start))
        conn.send(("load_failed", reason))
        return
    conn.send(("warming_up",))  # a crash from here on is the backend's first compute
    code = worker.warm_up()
    if code != 0:
        conn.send(
            (
                "load_failed",
                f"could not load {options.model_path}: llama.cpp's "
                f"first decode failed (code {code})",
            )
        )
        return
    log = read_since(log_path, log_start)
    conn.send(("loaded", worker.described(log)))
    threading.Thread(target=worker.serve_side, args=(side,), daemon=True).start()
    worker.serve(conn)


def _lower_priority(nice: int) -> None:
    """Yield the CPU to the UI process first: its frames then never wait behind llama.cpp's
    threads (created after this, so they inherit it). Best effort: some systems refuse."""
    try:
        os.nice(nice)
        target = os.getpriority(os.PRIO_PROCESS, 0)
        tids = os.listdir("/proc/self/task")  # Linux: nice is per thread, and numpy's BLAS
    except (OSError, AttributeError):  # pool started before this one
        return
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), target)
        except OSError:
            pass


def redirect_output(log_path: str) -> None:
    """llama.cpp logs to fds 1/2: send both to the log file so they never reach a terminal."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _load_error(path: str, exc: Exception, log_text: str = "") -> str:
    """One sentence: llama.cpp's own reason from the log, not its generic exception text."""
    reason = str(exc).strip() or type(exc).__name__
    if "Failed to load model from file" in reason:
        found = load_error_from_log(log_text)
        if found:
            reason = f"llama.cpp says: {found}"
        else:
            reason = "llama.cpp could not load it (see the log for details)"
    return f"could not load {path}: {reason}"


def open_llama(options: LoadOptions, verbose: bool):
    """A llama_cpp.Llama as LoadOptions say (also used by the benchmark's reference side).

    Two settings Llama() does not take are set on the params it builds: `use_extra_bufts`
    (repack off) and flash attention "auto" (llama.cpp's own choice, used with GPU layers)."""
    import llama_cpp

    auto_fa = options.flash_attn is None and options.n_gpu_layers != 0 and gpu_offload()
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
            logits_all=False,  # logits of the last token only: all rows would cost every step
            verbose=verbose,  # verbose=False would redirect this process's fds 1/2 while loading
        )


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
        if auto_fa:
            kwargs["params"].flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        return context_class(*args, **kwargs)

    llama_cpp.llama_cpp.llama_model_default_params = model_params
    _internals.LlamaContext = context
    try:
        yield
    finally:
        llama_cpp.llama_cpp.llama_model_default_params = model_defaults
        _internals.LlamaContext = context_class


class Worker:
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
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.kv_tokens: list[int] = []
        self.replies = 0
        self._pieces: dict[int, bytes] = {}
        self._logit_views: dict[int, np.ndarray] = {}
        self._eog: list[int] | None = None
        meta = self.llama.metadata
        self.chat_template = meta.get("tokenizer.chat_template", "")
        self.bos_id = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos_id = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, desc, 256)
        n_layers = llama_cpp.llama_model_n_layer(self.model)
        gpu_ok = bool(llama_cpp.llama_supports_gpu_offload())
        self.info = ModelInfo(
            path=options.model_path,
            n_vocab=self.n_vocab,
            n_ctx=self.n_ctx,
            n_ctx_train=llama_cpp.llama_model_n_ctx_train(self.model),
            load_s=load_s,
            gpu_offload_supported=gpu_ok,
            n_gpu_layers=_offloaded_layers(gpu_ok, options.n_gpu_layers, n_layers),
            n_layers=n_layers,
            n_threads=options.threads,
            has_chat_template=bool(self.chat_template),
            description=desc.value.decode("utf-8", "replace"),
            size_bytes=Path(options.model_path).stat().st_size,
            architecture=meta.get("general.architecture", ""),
            quant=desc.value.decode("utf-8", "replace").rsplit(" ", 1)[-1],
            n_params=int(llama_cpp.llama_model_n_params(self.model)),
            flash_attn=bool(options.flash_attn),
            repack=options.repack is not False,
        )

    def warm_up(self) -> int:
        """Run the backend once, as llama.cpp's own tools do, so a backend that crashes on this
        CPU does it now (the engine can then retry without it) and not on the first reply."""
        inject_cpu_fault(self.options, "warm_up")
        tok = self.bos_id if self.bos_id >= 0 else max(self.eos_id, 0)
        code = self.decode([tok, tok]) or self.decode_one(tok)
        self.lib.llama_memory_clear(self.mem, True)
        self.kv_tokens = []
        return code

    def described(self, log_text: str) -> ModelInfo:
        """The load's facts that only llama.cpp's log tells: GPU layers, flash attention as
        resolved, extra CPU buffer types in use."""
        from dataclasses import replace

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

    def decode(self, tokens: list[int], logits_all: bool = False) -> int:
        """Evaluate tokens after the cached ones; returns llama_decode's code (0 = ok)."""
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            b = self.batch
            n_past = len(self.kv_tokens)
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = n_past + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = logits_all
            b.logits[len(chunk) - 1] = True
            b.n_tokens = len(chunk)
            code = self.lib.llama_decode(self.ctx, b)
            if code != 0:
                return code
            self.kv_tokens.extend(chunk)
        return 0

    def decode_one(self, token: int) -> int:
        b = self.batch
        b.token[0] = token
        b.pos[0] = len(self.kv_tokens)
        b.n_seq_id[0] = 1
        b.seq_id[0][0] = 0
        b.logits[0] = True
        b.n_tokens = 1
        code = self.lib.llama_decode(self.ctx, b)
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

    # ---- sampling -----------------------------------------------------------------------

    def build_chain(self, s: SamplerSettings, history: list[int], ban_eog: bool):
        lib = self.lib
        params = lib.llama_sampler_chain_default_params()
        params.no_perf = True
        chain = lib.llama_sampler_chain_init(params)
        if ban_eog:
            eog = self.eog_tokens()
            biases = (lib.llama_logit_bias * len(eog))()
            for i, t in enumerate(eog):
                biases[i].token = t
                biases[i].bias = float("-inf")
            lib.llama_sampler_chain_add(
                chain, lib.llama_sampler_init_logit_bias(self.n_vocab, len(eog), biases)
            )
        if s.repeat_penalty != 1.0 and s.repeat_last_n > 0:
            lib.llama_sampler_chain_add(
                chain,
                lib.llama_sampler_init_penalties(
                    self.n_vocab, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0
                ),
            )
        if s.greedy:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            if s.top_k > 0:
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(s.top_k))
            if s.top_p < 1.0:
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(s.top_p, 1))
            if s.min_p > 0.0:
                lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(s.min_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(s.temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(s.seed))
        for tok in history[-max(s.repeat_last_n, 1) :]:
            lib.llama_sampler_accept(chain, tok)  # penalties keep their history
        return chain

    # ---- the prompt ---------------------------------------------------------------------

    def render_prompt(self, req: GenerateRequest) -> tuple[str, str]:
        """Templated prompt text and a warning (empty when the model's template was used)."""
        if req.raw_prompt is not None:
            return req.raw_prompt, ""
        if self.chat_template:
            try:
                return self._render_bounded(self.chat_template, req), ""
            except (template.TemplateError, TimeoutError) as exc:
                warning = f"the model's chat template failed ({exc}); using a plain template"
        else:
            warning = "this model has no chat template; using a plain template"
        return template.render_fallback(req.messages), warning

    def _render_bounded(self, source: str, req: GenerateRequest) -> str:
        """The model's template, stopped after TEMPLATE_TIMEOUT_S (it comes from the file)."""
        bos = self.piece(self.bos_id).decode("utf-8", "replace") if self.bos_id >= 0 else ""
        eos = self.piece(self.eos_id).decode("utf-8", "replace") if self.eos_id >= 0 else ""
        return call_with_timeout(
            lambda: template.render(source, req.messages, bos_token=bos, eos_token=eos),
            TEMPLATE_TIMEOUT_S,
        )

    # ---- serving ------------------------------------------------------------------------

    def serve(self, conn: Connection) -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            kind = msg[0]
            if kind == "generate":
                Generation(self, conn, msg[1]).run()
            elif kind == "score":
                conn.send(("scored", self.score(msg[1])))
            elif kind == "close":
                return
            # "cancel" and "settings" that arrive between replies are stale: ignore them

    def serve_side(self, side: Connection) -> None:
        """Tokenize requests on their own pipe, answered even while a reply is generating."""
        while True:
            try:
                msg = side.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "tokenize":
                _, text, special = msg
                ids = self.tokenize(text, add_bos=False, special=special)
                side.send([TokenPiece(i, self.piece(i)) for i in ids])
            elif msg[0] == "template":
                side.send(self.render_prompt(msg[1]))

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


class RecentTokens:
    """The penalty window (last n tokens) with O(1) membership, as the penalties sampler sees it."""

    def __init__(self, history: list[int], n: int) -> None:
        self.n = n
        self.window: deque[int] = deque(history[-n:] if n else [])
        self.counts = Counter(self.window)

    def push(self, tok: int) -> None:
        if not self.n:
            return
        self.window.append(tok)
        self.counts[tok] += 1
        if len(self.window) > self.n:
            old = self.window.popleft()
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]

    def __contains__(self, tok: object) -> bool:
        return tok in self.counts

    def __len__(self) -> int:
        return len(self.window)


class SubsetSampler:
    """Runs the native chain on the best few tokens instead of the whole vocabulary.

    Exact whenever top-k or greedy bounds the kept set and the m best were ranked with room for
    every token the penalties or the EOG ban can lower (candidates.ranked_size). Saves building
    and sorting an n_vocab-sized candidate array on every token.
    """

    DTYPE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

    def __init__(self, lib, capacity: int) -> None:
        self.lib = lib
        self.buf = np.zeros(capacity, dtype=self.DTYPE)
        self.arr = lib.llama_token_data_array()
        self.arr.data = self.buf.ctypes.data_as(ctypes.POINTER(lib.llama_token_data))
        self.ref = ctypes.byref(self.arr)

    def sample(self, chain, logits: np.ndarray, idx: np.ndarray) -> int:
        n = idx.shape[0]
        if n > self.buf.shape[0]:
            self.__init__(self.lib, n)
        buf = self.buf
        buf["id"][:n] = idx
        buf["logit"][:n] = logits[idx]
        self.arr.size = n
        self.arr.selected = -1
        self.arr.sorted = False
        self.lib.llama_sampler_apply(chain, self.ref)
        tok = int(buf["id"][self.arr.selected])
        self.lib.llama_sampler_accept(chain, tok)
        return tok


def subset_exact(s: SamplerSettings, m: int) -> bool:
    """Whether sampling among the m best tokens (m from ranked_size) equals sampling over the
    whole vocabulary."""
    return s.greedy or 0 < s.top_k <= m


class Generation:
    """One reply: prefill, then sample token by token, checking the pipe between tokens."""

    def __init__(self, worker: Worker, conn: Connection, req: GenerateRequest) -> None:
        self.w = worker
        self.conn = conn
        self.req = req
        self.settings = req.settings
        self.pending: list = []
        self.last_flush = 0.0
        self.cancelled = False
        self.new_settings: SamplerSettings | None = None

    def send(self, event, flush: bool = False) -> None:
        self.pending.append(event)
        now = time.perf_counter()
        if flush or now - self.last_flush >= FLUSH_S:
            self.conn.send(("events", self.pending))
            self.pending = []
            self.last_flush = now

    def check_pipe(self) -> None:
        while self.conn.poll():
            msg = self.conn.recv()
            if msg[0] == "cancel" or msg[0] == "close":
                self.cancelled = True
            elif msg[0] == "settings":
                self.new_settings = msg[1]

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - report, keep the worker alive
            self.send(Failed(f"generation failed: {type(exc).__name__}: {exc}"), flush=True)

    def _run(self) -> None:
        w, req = self.w, self.req
        t_request = time.perf_counter()
        if req.prompt_ids is not None:
            prompt_ids = list(req.prompt_ids)
            rendered, warning = (
                b"".join(w.piece(t) for t in prompt_ids).decode("utf-8", "replace"),
                "",
            )
        else:
            rendered, warning = w.render_prompt(req)
            prompt_ids = w.tokenize(rendered, add_bos=w.add_bos)
        prefix = list(req.reply_prefix_ids)
        full = prompt_ids + prefix
        budget = w.n_ctx - len(full)
        if budget < 1:
            self.send(
                Failed(
                    f"the prompt is {len(full)} tokens but the context holds {w.n_ctx}; "
                    "shorten it, clear the chat or load with a larger --ctx"
                ),
                flush=True,
            )
            return
        t_prefill = time.perf_counter()
        if not w.replies:
            inject_cpu_fault(w.options, "reply")
        w.replies += 1
        n_reused = w.reuse_prefix(full)
        # The last prompt token is always evaluated on its own, so its logits are computed the
        # same way whether the rest came from the cache or not: a seed then reproduces exactly.
        code = w.decode(full[n_reused:-1]) or w.decode_one(full[-1])
        t_prefill_end = time.perf_counter()
        if code != 0:
            w.kv_tokens = []
            w.lib.llama_memory_clear(w.mem, True)
            self.send(Failed(f"llama_decode failed on the prompt (code {code})"), flush=True)
            return
        self.send(
            PromptEvaluated(
                tokens=tuple(TokenPiece(i, w.piece(i)) for i in prompt_ids),
                rendered=rendered,
                n_new=len(full) - n_reused,
                n_reused=n_reused,
                prefill_s=t_prefill_end - t_prefill,
                t=t_prefill_end,
            ),
            flush=True,
        )
        if warning:
            self.send(Notice(warning), flush=True)

        s = self.settings
        chain = w.build_chain(s, full, req.ignore_eos)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text_parts = [decoder.decode(b"".join(w.piece(t) for t in prefix))]
        text_len = len(text_parts[0])
        stops = req.stop or (template.FALLBACK_STOPS if warning and req.raw_prompt is None else ())
        max_stop = max((len(x) for x in stops), default=0)
        recent = RecentTokens(full, s.repeat_last_n)
        times: list[float] = []
        index = len(prefix)
        reason = StopReason.MAX_TOKENS
        detail = ""
        text = ""
        lib, ctx = w.lib, w.ctx
        subset = SubsetSampler(lib, 256)
        n_banned = len(w.eog_tokens()) if req.ignore_eos else 0
        m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
        try:
            while True:
                if index - len(prefix) >= s.max_tokens:
                    reason = StopReason.MAX_TOKENS
                    break
                self.check_pipe()
                if self.cancelled:
                    reason = StopReason.CANCELLED
                    break
                if self.new_settings is not None:
                    s, self.new_settings = self.new_settings, None
                    lib.llama_sampler_free(chain)
                    chain = w.build_chain(s, w.kv_tokens, req.ignore_eos)
                    recent = RecentTokens(w.kv_tokens, s.repeat_last_n)
                    m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
                    self.send(SettingsApplied(s, index), flush=True)
                    if index - len(prefix) >= s.max_tokens:
                        reason = StopReason.MAX_TOKENS
                        break
                logits = w.logits()
                cands: tuple = ()
                logprob = None
                idx, log_z = rank(logits, m, req.top_n > 0)
                if req.top_n > 0:
                    cands = top_candidates(
                        logits, s, recent, req.top_n, w.piece, idx=idx, log_z=log_z
                    )
                if subset_exact(s, idx.shape[0]):
                    tok = subset.sample(chain, logits, idx)
                else:
                    tok = lib.llama_sampler_sample(chain, ctx, -1)
                t_tok = time.perf_counter()
                if not req.ignore_eos and lib.llama_vocab_is_eog(w.vocab, tok):
                    reason = StopReason.EOG
                    break
                times.append(t_tok)
                if req.top_n > 0:
                    logprob = token_logprob(logits, tok, log_z)
                piece = w.piece(tok)
                delta = decoder.decode(piece)
                text_parts.append(delta)
                text_len += len(delta)
                self.send(Token(index, tok, piece, delta, t_tok, logprob, cands), flush=index == 0)
                index += 1
                recent.push(tok)
                if stops:
                    text = "".join(text_parts)
                    text_parts = [text]
                    window = text[max(0, text_len - len(delta) - max_stop) :]
                    hit = min((p for p in (window.find(x) for x in stops) if p >= 0), default=-1)
                    if hit >= 0:
                        cut = max(0, text_len - len(delta) - max_stop) + hit
                        text_parts = [text[:cut]]
                        reason = StopReason.STOP_STRING
                        detail = next(x for x in stops if window.find(x) == hit)
                        break
                if len(w.kv_tokens) >= w.n_ctx:
                    reason = StopReason.CONTEXT_FULL
                    break
                code = w.decode_one(tok)
                if code != 0:
                    reason = StopReason.CONTEXT_FULL if code == 1 else StopReason.ERROR
                    detail = f"llama_decode returned {code}"
                    break
        finally:
            lib.llama_sampler_free(chain)
        text = "".join(text_parts)  # an incomplete UTF-8 tail (cut by max_tokens) is dropped
        stats = stats_from_times(
            t_request=t_request,
            t_prefill_start=t_prefill,
            t_prefill_end=t_prefill_end,
            token_times=times,
            prompt_tokens=len(prompt_ids),
            prompt_evaluated=len(full) - n_reused,
            n_past=len(w.kv_tokens),
            n_ctx=w.n_ctx,
        )
        self.send(Finished(reason, text, stats, detail), flush=True)


def _offloaded_layers(gpu_ok: bool, requested: int, n_layers: int) -> int:
    if not gpu_ok or requested == 0:
        return 0
    total = n_layers + 1  # llama.cpp counts the output layer too
    return total if requested < 0 else min(requested, total)


CPU_FAULT_ENV = "CHATAPP_FAULT_CPU_BACKEND"


def inject_cpu_fault(options: LoadOptions, where: str) -> None:
    """Fault injection for tests, standing in for llama.cpp's AMX crash on some CPUs:
    CHATAPP_FAULT_CPU_BACKEND=SIGSEGV kills the worker with that signal in warm-up while extra
    CPU buffers are on; "SIGSEGV@reply" does it in the first reply's prefill instead;
    "SIGILL:always" whatever the buffers."""
    value = os.environ.get(CPU_FAULT_ENV, "")
    value, _, at = value.partition("@")
    name, _, when = value.partition(":")
    if not name or (at or "warm_up") != where:
        return
    if when == "always" or options.repack is not False:
        import signal

        sys.stderr.flush()
        signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.kill(os.getpid(), getattr(signal, name))
