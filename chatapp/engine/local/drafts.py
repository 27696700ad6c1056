"""Draft tokens for speculative decoding: n-gram lookup in the text so far, or a draft model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.loaded_model import LoadedModel

NGRAM_MAX = 4  # the longest n-gram looked up (longer matches are tried first)
NGRAM_MIN = 2  # the shortest: a single token repeats too often to predict anything
DRAFT_MAX = 16  # the most tokens one draft proposes
DRAFT_START = 8  # the first draft's length; later ones follow what was accepted


class DraftLength:
    """How many tokens to draft next: doubles while whole drafts are accepted, falls back to
    one more than the last accepted run when one is rejected (a wrong draft costs the batch's
    extra rows, a short one the steps it did not save)."""

    def __init__(self, start: int = DRAFT_START, low: int = 2, high: int = DRAFT_MAX) -> None:
        self.value, self.low, self.high = start, low, high

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        if accepted >= drafted:
            self.value = min(self.high, self.value * 2)
        else:
            self.value = max(self.low, min(self.high, accepted + 1))


class NgramDrafter:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the text's last
    n tokens (n from NGRAM_MAX down to NGRAM_MIN), in the prompt and the reply so far.

    The index maps each n-gram whose next token is known to where that token is; it grows by
    one entry per n as tokens are appended, so a lookup costs a few dict probes.
    """

    name = "ngram"

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self.index = {}
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        seq = self.tokens
        for tok in tokens:
            p = len(seq)
            for n in range(NGRAM_MIN, NGRAM_MAX + 1):
                if p >= n:
                    self.index[tuple(seq[p - n : p])] = p  # this n-gram is followed by seq[p]
            seq.append(tok)

    def sync(self, tokens: list[int]) -> None:
        """Follow the target's tokens: append what is new (the usual case), or start over
        when they do not extend what was seen (a new reply, a rewind)."""
        n = len(self.tokens)
        if len(tokens) >= n and tokens[:n] == self.tokens:
            self.extend(tokens[n:])
        else:
            self.reset(tokens)

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens expected to follow `tokens`."""
        self.sync(tokens)
        seq = self.tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(seq) <= n:
                continue
            at = self.index.get(tuple(seq[-n:]))
            if at is not None:
                return seq[at : at + k]
        return []


class ModelDrafter:
    """A smaller model with the same vocabulary drafts greedily; its KV cache follows the
    target's tokens (the common prefix is kept, rejected drafts are dropped)."""

    name = "model"

    def __init__(self, worker: LoadedModel) -> None:
        self.w = worker

    def propose(self, tokens: list[int], k: int) -> list[int]:
        w = self.w
        room = w.n_ctx - len(tokens) - 1
        k = min(k, room)
        if k <= 0:
            return []
        n = w.reuse_prefix(tokens)
        if w.decode(tokens[n:-1]) or w.decode_one(tokens[-1]):
            w.lib.llama_memory_clear(w.mem, True)
            w.kv_tokens = []
            return []
        drafts: list[int] = []
        for _ in range(k):
            tok = int(np.argmax(w.logits()))
            if w.lib.llama_vocab_is_eog(w.vocab, tok):
                break
            drafts.append(tok)
            if len(drafts) == k or w.decode_one(tok):
                break
        return drafts


def vocab_mismatch(target: LoadedModel, draft: LoadedModel) -> str:
    """Why a draft model cannot draft for the target ('' if it can): the same vocabulary means
    the same size, the same BOS/EOS and the same bytes for every token (a sample is compared)."""
    if draft.n_vocab != target.n_vocab:
        return f"its vocabulary has {draft.n_vocab} tokens, the model's has {target.n_vocab}"
    if (draft.bos_id, draft.eos_id) != (target.bos_id, target.eos_id):
        return "its BOS/EOS tokens differ from the model's"
    step = max(1, target.n_vocab // 997)
    for tok in range(0, target.n_vocab, step):
        if draft.piece(tok) != target.piece(tok):
            return f"token {tok} is {draft.piece(tok)!r} there and {target.piece(tok)!r} here"
    return ""
