"""The token loop: one reply's prefill, then sampling token by token, candidates, stop strings."""

from __future__ import annotations

import codecs
import ctypes
import select
import time
from collections import Counter, deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

import numpy as np

from chatapp.engine.local import template
from chatapp.engine.local.candidates import (
    rank,
    ranked_size,
    step_facts,
    token_logprob,
    top_candidates,
)
from chatapp.engine.local.grammar import (
    GrammarSampler,
    GrammarUnusable,
    sample_with_grammar,
    start_grammar,
)
from chatapp.engine.local.loaded_model import FOLDED_SYSTEM_NOTE, inject_cpu_fault
from chatapp.engine.local.machine import physical_cores
from chatapp.engine.local.speculation import Speculation
from chatapp.engine.local.thread_governor import thread_stats
from chatapp.engine.protocol import (
    Candidate,
    Failed,
    Finished,
    GenerateRequest,
    Notice,
    PrefillProgress,
    PromptEvaluated,
    SettingsApplied,
    StopReason,
    Token,
    fills_the_cpu,
)
from chatapp.metrics import stats_from_times
from chatapp.sampling import VOCAB, SamplerSettings, native_chain

if TYPE_CHECKING:
    from chatapp.engine.local.loaded_model import LoadedModel

# Token events go at most every 50 ms (the first one at once): each send pickles, writes and
# wakes the reader, and 20 updates a second reads as smooth text. Where llama.cpp's threads
# fill every core, every 100 ms: each batch then costs the decode ~0.3 ms of CPU whatever its
# size (the write, the reader's wake-up and unpickling, all with the caches cold: 2-core
# EPYC, 6 tokens a batch: ~60 us a token in the two processes), and the TUI paints text no
# more often than that there (ui/streaming.py's LIGHT cadence).
FLUSH_S = 0.05
FLUSH_CPU_S = 0.1


def message_waiting(conn: Connection):
    """A check, made once per reply, of whether the parent has sent something.

    Connection.poll() builds a selector per call (~80 us with the caches cold after a decode,
    every token); one poll object registered once costs a single syscall. Where select.poll
    is missing (Windows) the Connection's own poll is used."""
    if not hasattr(select, "poll"):
        return conn.poll
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return lambda: bool(poller.poll(0))


def build_chain(w: LoadedModel, s: SamplerSettings, history: list[int], ban_eog: bool):
    """The native sampler chain for these settings (the sampler table's steps, after the EOG
    ban when asked), with the penalties' history accepted."""
    lib = w.lib
    params = lib.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = lib.llama_sampler_chain_init(params)
    if ban_eog:
        eog = w.eog_tokens()
        biases = (lib.llama_logit_bias * len(eog))()
        for i, t in enumerate(eog):
            biases[i].token = t
            biases[i].bias = float("-inf")
        lib.llama_sampler_chain_add(
            chain, lib.llama_sampler_init_logit_bias(w.n_vocab, len(eog), biases)
        )
    for step in native_chain(s):
        args = (w.n_vocab if a is VOCAB else a for a in step.args)
        lib.llama_sampler_chain_add(chain, getattr(lib, step.init)(*args))
    for tok in history[-max(s.repeat_last_n, 1) :]:
        lib.llama_sampler_accept(chain, tok)  # penalties keep their history
    return chain


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

    def __iter__(self):
        return iter(self.counts)

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
        self.ids, self.logits = self.buf["id"], self.buf["logit"]  # field views, made once
        self.arr = lib.llama_token_data_array()
        self.arr.data = self.buf.ctypes.data_as(ctypes.POINTER(lib.llama_token_data))
        self.ref = ctypes.byref(self.arr)

    def sample(self, chain, logits: np.ndarray, idx: np.ndarray, raw=None) -> int:
        self.fill(logits, idx, raw)
        return self.pick(chain)

    def fill(self, logits: np.ndarray, idx: np.ndarray, raw: np.ndarray | None = None) -> None:
        """Put the tokens `idx` and their logits (`raw` = logits[idx] where the caller has
        them) in the buffer (a grammar may then mask it)."""
        n = idx.shape[0]
        if n > self.buf.shape[0]:
            self.__init__(self.lib, n)
        self.ids[:n] = idx
        self.logits[:n] = logits[idx] if raw is None else raw
        self.n = n

    def pick(self, chain) -> int:
        """The chain's token among those fill() put in; accepted into the chain."""
        arr = self.arr
        arr.size = self.n
        arr.selected = -1
        arr.sorted = False
        self.lib.llama_sampler_apply(chain, self.ref)
        tok = int(self.ids[arr.selected])
        self.lib.llama_sampler_accept(chain, tok)
        return tok


def subset_exact(s: SamplerSettings, m: int) -> bool:
    """Whether sampling among the m best tokens (m from ranked_size) equals sampling over the
    whole vocabulary."""
    return s.greedy or 0 < s.top_k <= m


def sample_row(
    w: LoadedModel,
    chain,
    subset: SubsetSampler,
    row: int,
    s: SamplerSettings,
    recent,
    m: int,
    top_n: int,
    grammar: GrammarSampler | None = None,
):
    """One token from one logits row: the candidates to report (top_n of them), the token the
    chain picks (among the m ranked when that is exact, else over the whole vocabulary) and
    its log-probability before the samplers (None without candidates). With a grammar: the
    token is -1 when it allows nothing more (engine/local/grammar.py)."""
    if grammar is not None:
        exact = subset_exact(s, m)
        return sample_with_grammar(w, chain, subset, grammar, row, s, recent, m, top_n, exact)
    logits = w.logits(row)
    idx, log_z = rank(logits, m, top_n > 0)
    cands: Sequence[Candidate] = ()
    if subset_exact(s, idx.shape[0]):
        raw = logits[idx]
        if top_n > 0:  # the facts only: the rows are made where they are shown
            cands = step_facts(logits, idx, log_z, s, recent, top_n, w.piece, raw)
        tok = subset.sample(chain, logits, idx, raw)
    else:  # top-k off: the rows count the unranked tokens the samplers keep, now
        if top_n > 0:
            cands = top_candidates(
                logits, s, recent, top_n, w.piece, idx=idx, log_z=log_z, vocab=logits
            )
        tok = w.lib.llama_sampler_sample(chain, w.ctx, row)
    logprob = token_logprob(logits, tok, log_z) if top_n > 0 else None
    return tok, cands, logprob


class Generation:
    """One reply: prefill, then sample token by token, checking the pipe between tokens."""

    def __init__(self, worker: LoadedModel, conn: Connection, req: GenerateRequest) -> None:
        self.w = worker
        self.conn = conn
        self.req = req
        self.settings = req.settings
        self.pending: list = []
        self.last_flush = 0.0
        self.flush_s = FLUSH_CPU_S if fills_the_cpu(worker.info, physical_cores()) else FLUSH_S
        self.cancelled = False
        self.new_settings: SamplerSettings | None = None
        self.new_steering = None  # a Steering sent mid-reply (engine/local/steering.py)
        self.has_message = message_waiting(conn)

    def send(self, event, flush: bool = False) -> None:
        self.pending.append(event)
        now = time.perf_counter()
        if flush or now - self.last_flush >= self.flush_s:
            self.conn.send(("events", self.pending))
            self.pending = []
            self.last_flush = now

    def check_pipe(self) -> None:
        while self.has_message():
            msg = self.conn.recv()
            if msg[0] == "cancel" or msg[0] == "close":
                self.cancelled = True
            elif msg[0] == "settings":
                self.new_settings = msg[1]
            elif msg[0] == "steering":
                self.new_steering = msg[1]

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # report, keep the worker alive
            self.send(Failed(f"generation failed: {type(exc).__name__}: {exc}"), flush=True)

    def prefill(self, full: list[int], prompt_ids: list[int], rendered: str):
        """Evaluate what the KV cache lacks of `full` and report it (PromptEvaluated, and
        PrefillProgress per batch when it takes more than one); returns (tokens evaluated,
        when it ended), or None after reporting a failure."""
        w = self.w
        t_prefill = time.perf_counter()
        n_reused = w.reuse_prefix(full)
        n_new = len(full) - n_reused
        progress = None
        if n_new > w.n_batch:  # more than one batch: say how far it got (a long silent wait
            # reads as a crash)
            progress = lambda done: self.send(  # noqa: E731
                PrefillProgress(done, n_new, time.perf_counter() - t_prefill), flush=True
            )
        # The last prompt token is always evaluated on its own, so its logits are computed the
        # same way whether the rest came from the cache or not: a seed then reproduces exactly.
        code = w.decode(full[n_reused:-1], progress=progress) or w.decode_one(full[-1])
        t_end = time.perf_counter()
        if code != 0:
            w.kv_tokens = []
            w.lib.llama_memory_clear(w.mem, True)
            self.send(Failed(f"llama_decode failed on the prompt (code {code})"), flush=True)
            return None
        self.send(
            PromptEvaluated(
                tokens=tuple(w.pieces(prompt_ids)),
                rendered=rendered,
                n_new=n_new,
                n_reused=n_reused,
                prefill_s=t_end - t_prefill,
                t=t_end,
            ),
            flush=True,
        )
        return n_new, t_end

    def _run(self) -> None:
        w, req = self.w, self.req
        t_request = time.perf_counter()
        if req.prompt_ids is not None:
            prompt_ids = list(req.prompt_ids)
            rendered, warning = (
                b"".join(w.piece(t) for t in prompt_ids).decode("utf-8", "replace"),
                "",
            )
            t_rendered = t_tokenized = time.perf_counter()
        else:
            rendered, warning = w.render_prompt(req)
            t_rendered = time.perf_counter()
            prompt_ids = w.tokenize(rendered, add_bos=w.add_bos)
            t_tokenized = time.perf_counter()
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
        try:
            grammar = start_grammar(w, req, prefix)
        except GrammarUnusable as exc:
            self.send(Failed(str(exc)), flush=True)
            return
        drafter, draft_note = w.drafter(req.draft)
        if draft_note:
            self.send(Notice(draft_note), flush=True)
        t_prefill = time.perf_counter()
        if not w.replies:
            inject_cpu_fault(w.options, "reply")
        w.replies += 1
        gov = w.governor
        switched = len(gov.switches) if gov is not None else 0
        if gov is not None:
            gov.before_prefill()
        prefilled = self.prefill(full, prompt_ids, rendered)
        if gov is not None:
            gov.after_prefill()
        if prefilled is None:
            return
        n_new, t_prefill_end = prefilled
        plain = bool(warning) and warning != FOLDED_SYSTEM_NOTE  # the plain fallback template
        if plain or (warning and warning not in w.noted):
            w.noted.add(warning)
            self.send(Notice(warning), flush=True)

        s = self.settings
        chain = build_chain(w, s, full, req.ignore_eos)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text_parts = [decoder.decode(b"".join(w.piece(t) for t in prefix))]
        text_len = len(text_parts[0])
        stops = req.stop or (template.FALLBACK_STOPS if plain and req.raw_prompt is None else ())
        max_stop = max((len(x) for x in stops), default=0)
        recent = RecentTokens(full, s.repeat_last_n)
        times: list[float] = []
        index = len(prefix)
        reason = StopReason.MAX_TOKENS
        detail = ""
        text = ""
        lib = w.lib
        subset = SubsetSampler(lib, 256)
        n_banned = len(w.eog_tokens()) if req.ignore_eos else 0
        m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
        spec = Speculation(w, drafter)
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
                    chain = build_chain(w, s, w.kv_tokens[: spec.verified], req.ignore_eos)
                    recent = RecentTokens(w.kv_tokens[: spec.verified], s.repeat_last_n)
                    m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
                    self.send(SettingsApplied(s, index), flush=True)
                    if index - len(prefix) >= s.max_tokens:
                        reason = StopReason.MAX_TOKENS
                        break
                if self.new_steering is not None:  # from the next decode on
                    self.send(w.steering.change(self.new_steering, index), flush=True)
                    self.new_steering = None
                tok, cands, logprob = sample_row(
                    w, chain, subset, spec.row, s, recent, m, req.top_n, grammar
                )
                t_tok = time.perf_counter()
                if tok < 0:  # a grammar that allows nothing more (its end, the EOG banned)
                    reason, detail = StopReason.EOG, "the grammar is complete"
                    break
                if not req.ignore_eos and lib.llama_vocab_is_eog(w.vocab, tok):
                    reason = StopReason.EOG
                    break
                drafted, rejected = spec.check(tok)
                times.append(t_tok)
                piece = w.piece(tok)
                delta = decoder.decode(piece)
                text_parts.append(delta)
                text_len += len(delta)
                self.send(
                    Token(index, tok, piece, delta, t_tok, logprob, cands, drafted, rejected),
                    flush=index == 0,
                )
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
                if drafted:
                    continue  # already in the KV cache: it went in as the next row's input
                if len(w.kv_tokens) >= w.n_ctx:
                    reason = StopReason.CONTEXT_FULL
                    break
                left = s.max_tokens - (index - len(prefix))
                t_decode, n_before = time.perf_counter(), len(w.kv_tokens)
                code = spec.decode(tok, left)
                if gov is not None and len(w.kv_tokens) > n_before:  # a batch: as one row
                    gov.step(spec.one_row(time.perf_counter() - t_decode), index)
                if code != 0:
                    reason = StopReason.CONTEXT_FULL if code == 1 else StopReason.ERROR
                    detail = f"llama_decode returned {code}"
                    break
        finally:
            lib.llama_sampler_free(chain)
            if grammar is not None:
                grammar.free()
            spec.end()
        text = "".join(text_parts)  # an incomplete UTF-8 tail (cut by max_tokens) is dropped
        stats = stats_from_times(
            t_request=t_request,
            t_prefill_start=t_prefill,
            t_prefill_end=t_prefill_end,
            token_times=times,
            prompt_tokens=len(prompt_ids),
            prompt_evaluated=n_new,
            n_past=len(w.kv_tokens),
            n_ctx=w.n_ctx,
            template_s=t_rendered - t_request,
            tokenize_s=t_tokenized - t_rendered,
            **spec.stats(),
            **thread_stats(gov, switched, w.options.threads),
        )
        self.send(Finished(reason, text, stats, detail), flush=True)
