"""One reply's token loop: its prefill, then sampling token by token, drafts, stop strings."""

from __future__ import annotations

import codecs
import time

from chatapp.engine.local.load import chat_template
from chatapp.engine.local.load.loaded_model import FOLDED_SYSTEM_NOTE, inject_cpu_fault
from chatapp.engine.local.load.thread_governor import thread_stats
from chatapp.engine.local.loop.candidates import ranked_size
from chatapp.engine.local.loop.reply_loop import ReplyLoop
from chatapp.engine.local.loop.row_sampling import ReplySampler, SubsetSampler, sample_row
from chatapp.engine.local.loop.speculation import Speculation
from chatapp.engine.protocol import Failed, Finished, Notice, StopReason, Token


class Generation(ReplyLoop):
    """One reply: prefill, then sample token by token, checking the pipe between tokens."""

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
        grammars = self.start_grammars(1, prefix)
        if grammars is None:
            return
        grammar = grammars[0]
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
        sampler = ReplySampler(w, s, full, req.ignore_eos)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text_parts = [decoder.decode(b"".join(w.piece(t) for t in prefix))]
        text_len = len(text_parts[0])
        stops = req.stop or (
            chat_template.FALLBACK_STOPS if plain and req.raw_prompt is None else ()
        )
        max_stop = max((len(x) for x in stops), default=0)
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
                changed = self.take_new_settings(
                    lambda: [(sampler, w.kv_tokens[: spec.verified])], index
                )
                if changed is not None:
                    s = changed
                    m = ranked_size(s, req.top_n, w.n_vocab, n_banned)
                    if index - len(prefix) >= s.max_tokens:
                        reason = StopReason.MAX_TOKENS
                        break
                if self.new_steering is not None:  # from the next decode on
                    self.send(w.steering.change(self.new_steering, index), flush=True)
                    self.new_steering = None
                tok, cands, logprob = sample_row(
                    w, sampler.chain, subset, spec.row, s, sampler.recent, m, req.top_n, grammar
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
                sampler.recent.push(tok)
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
            sampler.free()
            if grammar is not None:
                grammar.free()
            spec.end()
        text = "".join(text_parts)  # an incomplete UTF-8 tail (cut by max_tokens) is dropped
        stats = self.stats(
            (t_request, t_prefill, t_prefill_end),
            times,
            len(prompt_ids),
            n_new,
            template_s=t_rendered - t_request,
            tokenize_s=t_tokenized - t_rendered,
            **spec.stats(),
            **thread_stats(gov, switched, w.options.threads),
        )
        self.send(Finished(reason, text, stats, detail), flush=True)
