"""One reply's token loop: its prompt, its prefill, then token by token (drafts, stop strings)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chatapp.engine.local.load import chat_template
from chatapp.engine.local.load.cpu_backend import inject_cpu_fault
from chatapp.engine.local.load.loaded_model import FOLDED_SYSTEM_NOTE
from chatapp.engine.local.load.thread_governor import thread_stats
from chatapp.engine.local.loop.candidates import ranked_size
from chatapp.engine.local.loop.reply_loop import ReplyLoop
from chatapp.engine.local.loop.row_sampling import ReplySampler
from chatapp.engine.local.loop.speculation import Speculation
from chatapp.engine.local.loop.token_step import TokenStep
from chatapp.engine.protocol import Failed, Finished, Notice, StopReason

EXACT_NOTE = (
    "drafts on: attention now runs exactly as one token at a time (flash attention, Q8_0 K "
    "cache), so drafted replies equal replies without drafts; the conversation is read again"
)
INEXACT_NOTE = (
    "drafted replies can part from replies without drafts where two candidates are close, "
    "as batches sum in another order here: "
)

if TYPE_CHECKING:
    from chatapp.engine.local.load.thread_governor import ThreadGovernor
    from chatapp.engine.local.loop.grammar_sampler import GrammarSampler


@dataclass
class Prompt:
    """The reply's prompt as tokens (`ids`, then the reply's given start, `prefix`), the
    template's warning, and when it was asked for, rendered and tokenized."""

    ids: list[int]
    rendered: str
    warning: str
    prefix: list[int]
    full: list[int]
    times: tuple[float, float, float]


class Generation(ReplyLoop):
    """One reply: prefill, then sample token by token, checking the pipe between tokens."""

    def _run(self) -> None:
        w, req = self.w, self.req
        prompt = self._prepare_prompt()
        if prompt is None:
            return
        grammars = self.start_grammars(1, prompt.prefix)
        if grammars is None:
            return
        grammar = grammars[0]
        drafter, draft_note = w.drafter(req.draft)
        if draft_note:
            self.send(Notice(draft_note), flush=True)
        if drafter is not None:
            self._exact_drafts()
        gov = w.governor
        switched = len(gov.switches) if gov is not None else 0
        t_prefill = time.perf_counter()
        prefilled = self._prefill(prompt)
        if prefilled is None:
            return
        n_new, t_prefill_end = prefilled
        spec = Speculation(w, drafter)
        step = self._token_step(prompt, grammar, spec)
        try:
            self._loop(step, spec, len(prompt.prefix), gov)
        finally:
            step.sampler.free()
            if grammar is not None:
                grammar.free()
            spec.end()
        self._finish(prompt, (t_prefill, t_prefill_end), n_new, step, spec, (gov, switched))

    def _exact_drafts(self) -> None:
        """The first reply with drafts: the context made anew with exact batches, so drafted
        replies are the replies without drafts from now on (said once; the conversation is
        read again); where that cannot be, why, said once."""
        w = self.w
        if w.info.exact_batches:
            return
        if not w.exact_blocker() and w.loaded_as.exact_batches is None and w.make_exact():
            self.send(Notice(EXACT_NOTE), flush=True)
            return
        why = w.exact_blocker()  # (read again: llama.cpp may have refused it just now)
        if why:
            note = INEXACT_NOTE + why
            if note not in w.noted:
                w.noted.add(note)
                self.send(Notice(note), flush=True)

    def _finish(
        self,
        prompt: Prompt,
        prefill: tuple[float, float],
        n_new: int,
        step: TokenStep,
        spec: Speculation,
        threads: tuple[ThreadGovernor | None, int],
    ) -> None:
        """The reply's text and stats in its Finished event (`threads`: the governor and how
        many switches it had made before the reply)."""
        t_request, t_rendered, t_tokenized = prompt.times
        stats = self.stats(
            (t_request, *prefill),
            step.times,
            len(prompt.ids),
            n_new,
            template_s=t_rendered - t_request,
            tokenize_s=t_tokenized - t_rendered,
            **spec.stats(),
            **thread_stats(*threads, self.w.options.threads),
        )
        # an incomplete UTF-8 tail (cut by max_tokens) is dropped
        self.send(Finished(step.reason, step.text(), stats, step.detail), flush=True)

    def _prepare_prompt(self) -> Prompt | None:
        """The prompt rendered and tokenized (or given as tokens); None after reporting that it
        leaves the reply no room in the context."""
        w, req = self.w, self.req
        t_request = time.perf_counter()
        if req.prompt_ids is not None:
            ids = list(req.prompt_ids)
            rendered = b"".join(w.piece(t) for t in ids).decode("utf-8", "replace")
            warning = ""
            t_rendered = t_tokenized = time.perf_counter()
        else:
            rendered, warning = w.render_prompt(req)
            t_rendered = time.perf_counter()
            ids = w.tokenize(rendered, add_bos=w.add_bos)
            t_tokenized = time.perf_counter()
        prefix = list(req.reply_prefix_ids)
        full = ids + prefix
        if w.n_ctx - len(full) < 1:
            self.send(
                Failed(
                    f"the prompt is {len(full)} tokens but the context holds {w.n_ctx}; "
                    "shorten it, clear the chat or load with a larger --ctx"
                ),
                flush=True,
            )
            return None
        return Prompt(ids, rendered, warning, prefix, full, (t_request, t_rendered, t_tokenized))

    def _prefill(self, prompt: Prompt) -> tuple[int, float] | None:
        """The prompt into the KV cache (the thread governor told, the first reply's injected
        CPU fault raised); then the template's warning said where it is news."""
        w = self.w
        if not w.replies:
            inject_cpu_fault(w.options, "reply")
        w.replies += 1
        gov = w.governor
        if gov is not None:
            gov.before_prefill()
        prefilled = self.prefill(prompt.full, prompt.ids, prompt.rendered)
        if gov is not None:
            gov.after_prefill()
        if prefilled is None:
            return None
        warning = prompt.warning
        if self._plain(prompt) or (warning and warning not in w.noted):
            w.noted.add(warning)
            self.send(Notice(warning), flush=True)
        return prefilled

    @staticmethod
    def _plain(prompt: Prompt) -> bool:
        """Whether the prompt was rendered with the plain fallback template."""
        return bool(prompt.warning) and prompt.warning != FOLDED_SYSTEM_NOTE

    def _token_step(
        self, prompt: Prompt, grammar: GrammarSampler | None, spec: Speculation
    ) -> TokenStep:
        """The reply's per-token step: its sampler on the prompt, its drafts, its stop strings."""
        w, req = self.w, self.req
        sampler = ReplySampler(w, self.settings, prompt.full, req.ignore_eos)
        plain = self._plain(prompt)
        stops = req.stop or (
            chat_template.FALLBACK_STOPS if plain and req.raw_prompt is None else ()
        )
        return TokenStep(
            w,
            self.send,
            sampler,
            grammar,
            req.top_n,
            req.ignore_eos,
            prefix=prompt.prefix,
            stops=stops,
            spec=spec,
        )

    def _loop(
        self, step: TokenStep, spec: Speculation, n_prefix: int, gov: ThreadGovernor | None
    ) -> None:
        """Token by token until the reply ends (`step.reason` says why): the pipe read between
        tokens, each token sampled by `step`, then decoded with the drafts that may follow."""
        w, req = self.w, self.req
        s = self.settings
        n_banned = len(w.eog_tokens()) if req.ignore_eos else 0
        m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
        sampler, take = step.sampler, step.step
        histories = lambda: [(sampler, w.kv_tokens[: spec.verified])]  # noqa: E731
        index = n_prefix
        while index - n_prefix < s.max_tokens:
            self.check_pipe()
            if self.cancelled:
                step.reason = StopReason.CANCELLED
                return
            changed = self.take_new_settings(histories, index)
            if changed is not None:
                s = changed
                m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
                if index - n_prefix >= s.max_tokens:
                    return
            if self.new_steering is not None:  # from the next decode on
                self.send(w.steering.change(self.new_steering, index), flush=True)
                self.new_steering = None
            tok = take(spec.row, s, m, index)
            if tok < 0:
                return
            index += 1
            if step.drafted:
                continue  # already in the KV cache: it went in as the next row's input
            if len(w.kv_tokens) >= w.n_ctx:
                step.reason = StopReason.CONTEXT_FULL
                return
            t_decode, n_before = time.perf_counter(), len(w.kv_tokens)
            code = spec.decode(tok, s.max_tokens - (index - n_prefix))
            if gov is not None and len(w.kv_tokens) > n_before:  # a batch: as one row
                gov.step(spec.one_row(time.perf_counter() - t_decode), index)
            if code != 0:
                step.reason = StopReason.CONTEXT_FULL if code == 1 else StopReason.ERROR
                step.detail = f"llama_decode returned {code}"
                return
