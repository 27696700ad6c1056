"""Several replies to one prompt in one batch: parallel sequences sharing the prompt's KV cache."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from chatapp.engine.local.loop.candidates import ranked_size
from chatapp.engine.local.loop.reply_loop import ReplyLoop
from chatapp.engine.local.loop.row_sampling import ReplySampler
from chatapp.engine.local.loop.token_step import TokenStep
from chatapp.engine.protocol import Failed, Finished, StopReason

if TYPE_CHECKING:
    from chatapp.engine.local.loop.grammar_sampler import GrammarSampler


class Sequence:
    """One of the replies: its token step (sampler, text, times), its tokens, its position in
    the KV cache, whether it has ended."""

    def __init__(self, loop: ReplyLoop, seq: int, history: list[int], grammar) -> None:
        w, req = loop.w, loop.req
        self.seq = seq
        self.grammar: GrammarSampler | None = grammar  # its own grammar state, or None
        self.sampler = ReplySampler(w, loop.settings, history, req.ignore_eos, seq)
        self.step = TokenStep(
            w, loop.send, self.sampler, grammar, req.top_n, req.ignore_eos, spec=None, seq=seq
        )
        self.tokens: list[int] = []
        self.pos = len(history)  # where its next token goes in the KV cache
        self.row = -1  # its logits row in the last batch
        self.reason: StopReason | None = None


class ParallelGeneration(ReplyLoop):
    """`n_alternatives` replies decoded together: one llama_decode per step carries a token of
    each reply still going (the batching lesson: the weights are read once for all of them).

    Token events carry `seq`; the one Finished holds every reply's text in `alternatives` and
    stats over all of them (completion tokens summed, decode time the wall time). Afterwards the
    KV cache keeps the first reply's sequence only (what the next turn most likely reuses)."""

    def _run(self) -> None:
        w, req = self.w, self.req
        n = min(req.n_alternatives, w.n_seq_max)  # llama_open.PARALLEL_SEQUENCES
        t_request = time.perf_counter()
        rendered, _ = w.render_prompt(req)  # (a template fallback was said by plain replies)
        prompt = w.tokenize(rendered, add_bos=w.add_bos)
        if w.n_ctx - len(prompt) < n:
            self.send(Failed(f"the prompt is {len(prompt)} tokens; it leaves no room"), flush=True)
            return
        t_prefill = time.perf_counter()
        prefilled = self.prefill(prompt, prompt, rendered)
        if prefilled is None:
            return
        n_new, t_prefill_end = prefilled
        lib = w.lib
        for s in range(1, n):  # every reply starts from the prompt's cache, shared
            lib.llama_memory_seq_rm(w.mem, s, -1, -1)
            lib.llama_memory_seq_cp(w.mem, 0, s, -1, -1)
        grammars = self.start_grammars(n, [])
        if grammars is None:
            return
        seqs = [Sequence(self, s, prompt, grammars[s]) for s in range(n)]
        try:
            self._loop(seqs, prompt)
        finally:
            for q in seqs:
                q.sampler.free()
                if q.grammar is not None:
                    q.grammar.free()
            for s in range(1, n):
                lib.llama_memory_seq_rm(w.mem, s, -1, -1)
        self._finish(seqs, prompt, (t_request, t_prefill, t_prefill_end), n_new)

    def _loop(self, seqs: list[Sequence], prompt: list[int]) -> None:
        """Step by step until every reply has ended (each Sequence's `reason` says why): the
        pipe read between steps, a token sampled for each reply still going, one decode."""
        w, req = self.w, self.req
        settings = self.settings
        m = ranked_size(settings, req.top_n, w.n_vocab)
        histories = lambda: [(q.sampler, prompt + q.tokens) for q in seqs]  # noqa: E731
        index = 0
        while True:
            self.check_pipe()
            changed = self.take_new_settings(histories, index)
            if changed is not None:
                settings = changed
                m = ranked_size(settings, req.top_n, w.n_vocab)
            if self.new_steering is not None:  # every reply, from the next decode on
                self.send(w.steering.change(self.new_steering, index), flush=True)
                self.new_steering = None
            live = [q for q in seqs if q.reason is None]
            if self.cancelled:
                for q in live:
                    q.reason = StopReason.CANCELLED
                return
            if not live:
                return
            for q in live:
                self._step(q, settings, m)
            live = [q for q in live if q.reason is None]
            if not live:
                return
            code = self._decode(live)
            if code != 0:
                for q in live:
                    q.reason = StopReason.CONTEXT_FULL if code == 1 else StopReason.ERROR
                return
            index += 1

    def _finish(
        self, seqs: list[Sequence], prompt: list[int], times: tuple[float, float, float], n_new
    ) -> None:
        """The first reply's tokens kept in the KV cache; every reply's text in one Finished."""
        w = self.w
        first = seqs[0]  # its decoded tokens stay in the cache
        w.kv_tokens = prompt + first.tokens[: first.pos - len(prompt)]
        w.lib.llama_memory_seq_rm(w.mem, 0, len(w.kv_tokens), -1)
        token_times = sorted(t for q in seqs for t in q.step.times)
        stats = self.stats(times, token_times, len(prompt), n_new)
        texts = tuple(q.step.text() for q in seqs)
        reasons = tuple(str(q.reason or StopReason.MAX_TOKENS) for q in seqs)
        self.send(
            Finished(
                StopReason(reasons[0]),
                texts[0],
                stats,
                alternatives=texts,
                alternative_reasons=reasons,
            ),
            flush=True,
        )

    def _step(self, q: Sequence, settings, m: int) -> None:
        """Sample q's next token from its row of the last batch and report it."""
        tokens = q.tokens
        if len(tokens) >= settings.max_tokens:
            q.reason = StopReason.MAX_TOKENS
            return
        tok = q.step.step(q.row, settings, m, len(tokens))
        if tok < 0:  # its grammar allows nothing more, or an EOG token
            q.reason = StopReason.EOG
            return
        tokens.append(tok)
        if q.pos >= self.w.n_ctx:
            q.reason = StopReason.CONTEXT_FULL

    def _decode(self, live: list[Sequence]) -> int:
        """One llama_decode with the newest token of every reply still going."""
        w = self.w
        b = w.batch
        for i, q in enumerate(live):
            b.token[i] = q.tokens[-1]
            b.pos[i] = q.pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = q.seq
            b.logits[i] = True
            q.row = i
        b.n_tokens = len(live)
        code = w.lib.llama_decode(w.ctx, b)
        if code == 0:
            for q in live:
                q.pos += 1
        return code
