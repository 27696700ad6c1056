"""Draft tokens for speculative decoding: n-gram lookup in the text so far, or a draft model."""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chatapp.engine.local.load.loaded_model import LoadedModel

NGRAM_MAX = 4  # the longest n-gram looked up (longer matches are tried first)
NGRAM_MIN = 2  # the shortest anywhere: a single token repeats too often to predict anything
NEAR = 24  # after the text leaves the copy it followed, its next tokens are looked for this
# near where it left (an edit replaces a few words and the copy goes on): there one token is
# enough
SUBS_MAX = 16  # replacements remembered per reply (an edit's renamed words)
SUB_LONGEST = 8  # tokens on either side of one replacement
LEARN_AFTER = 4  # a replacement is learned only where the reply had followed the copy this long
COPY_RUN = 16  # reply tokens in a row that agree with the place drafted from: a copy

Sub = tuple[tuple[int, ...], tuple[int, ...]]  # (tokens of the source, what the reply wrote)


class NgramDrafter:
    """Prompt lookup: the tokens that followed an earlier occurrence of the text's last tokens,
    in the prompt and the reply so far.

    A reply that copies (a rewrite, an edit) is followed: while its tokens are those after the
    place its last draft came from, the next draft goes on from there, whatever the latest
    occurrence of the last n-gram is (a text repeats its phrases). When it leaves the copy
    (a replaced word), its next tokens are looked for just after the place it left (NEAR), a
    single token being enough there; elsewhere an occurrence of the last n tokens, n from
    NGRAM_MAX down to NGRAM_MIN: the first after the place the copy was left (a copy moves
    forward, and an edit's phrases repeat: "You must give", "You must cause", "You must
    retain"), else the latest.

    Where the copy is found again, what the reply wrote instead of the source's tokens is
    remembered as a replacement (" settings" -> " options", "Thomas Hale" -> "Peter Grey"),
    and drafts made from the copy after that carry the replacement wherever the source has
    those tokens again; a replacement the reply does not make once is forgotten.

    The index maps each n-gram whose next token is known to where that token is, in order; it
    grows by one entry per n as tokens are appended, so a lookup costs a few dict probes and a
    bisection.
    """

    name = "ngram"

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.cursor: int | None = None  # where the followed copy's next source token is
        self.pending: list[int] = []  # a replacement's tokens expected before that one
        self.sub_start = 0  # where the source tokens that replacement stands for begin
        self.left: int | None = None  # where the copy was when the text left it
        self.left_when = 0  # how long the text was then
        self.left_run = 0  # how long the reply had followed the copy then
        self.run = 0  # reply tokens in a row that agreed with the place followed
        self.origin = ""  # how that place was found: "near" or "lookup"
        self.subs: dict[int, list[Sub]] = {}  # by the source's first token

    def reset(self, tokens: list[int]) -> None:
        self.tokens = []
        self.index = {}
        self.cursor = self.left = None
        self.pending = []
        self.subs = {}
        self.run = 0
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        seq = self.tokens
        for tok in tokens:
            p = len(seq)
            for n in range(NGRAM_MIN, NGRAM_MAX + 1):
                if p >= n:  # this n-gram is followed by seq[p]
                    self.index.setdefault(tuple(seq[p - n : p]), []).append(p)
            seq.append(tok)

    def sync(self, tokens: list[int]) -> list[int]:
        """Follow the target's tokens: append what is new (the usual case), or start over
        when they do not extend what was seen (a new reply, a rewind). Returns the new ones."""
        n = len(self.tokens)
        # (the seen text's end only: a rewind that kept it costs a wrong guess, never a wrong
        # token, where comparing it all costs ~20 us a step 4,000 tokens deep)
        if len(tokens) >= n and tokens[max(0, n - 16) : n] == self.tokens[-16:]:
            new = tokens[n:]
            self._follow(new, n)
            self.extend(new)
            return new
        self.reset(tokens)
        return []

    def _sub_at(self, at: int, end: int) -> Sub | None:
        """A remembered replacement whose source tokens start at `at` (and end before `end`)."""
        seq = self.tokens
        for sub in self.subs.get(seq[at], ()):
            old = sub[0]
            if at + len(old) <= end and tuple(seq[at : at + len(old)]) == old:
                return sub
        return None

    def _follow(self, new: list[int], end: int) -> None:
        """Move the cursor over the new tokens while they are the copy's (before `end`, the
        text seen so far), replacements included; where they part, remember the place and
        drop the cursor (and the replacement that did not hold)."""
        at = self.cursor
        if at is None:
            return
        pending = self.pending
        for i, tok in enumerate(new):
            if not pending and at < end and (sub := self._sub_at(at, end)) is not None:
                self.sub_start, pending, at = at, list(sub[1]), at + len(sub[0])
            if pending and tok == pending[0]:
                pending = pending[1:]
            elif not pending and at < end + i and self._source(at, end, new) == tok:
                at += 1  # (past `end`, the copy is the reply's own new tokens: a loop)
            else:
                if pending:  # the reply kept what the replacement stood for, or wrote else
                    self._forget(self.sub_start)
                    at = self.sub_start
                self.cursor, self.left, self.left_when = None, at, end + i
                self.pending, self.left_run = [], self.run
                return
            self.run += 1
        self.cursor, self.pending = at, pending

    def _source(self, at: int, end: int, new: list[int]) -> int:
        return self.tokens[at] if at < end else new[at - end]

    def _forget(self, at: int) -> None:
        sub = self._sub_at(at, len(self.tokens))
        if sub is not None:
            self.subs[sub[0][0]].remove(sub)

    def _learn(self, resumed: int, overlap: int) -> None:
        """The copy was found again at `resumed`, the reply's last `overlap` tokens being the
        source's just before it: what the reply wrote since it left the copy replaces what
        the source had there."""
        seq, left = self.tokens, self.left
        assert left is not None
        old = tuple(seq[left : resumed - overlap])
        new = tuple(seq[self.left_when : len(seq) - overlap])
        if not old or old == new or len(old) > SUB_LONGEST or len(new) > SUB_LONGEST:
            return
        if self.left_run < LEARN_AFTER:  # a lookup's place left at once: no copy was followed
            return
        if sum(len(v) for v in self.subs.values()) >= SUBS_MAX or self._sub_at(left, resumed):
            return
        self.subs.setdefault(old[0], []).append((old, new))

    def _locate(self) -> None:
        """Where to draft from when no copy is followed: near where it was left, else a
        lookup; sets the cursor, the run of agreeing tokens and how the place was found."""
        at = self._near() if self.left is not None else None
        if at is not None:
            self.origin = "near"
        else:
            at = self._lookup()
            self.origin = "lookup"
            self.run = self._agreement(at) if at is not None else 0
        self.cursor, self.pending = at, []

    def _agreement(self, at: int) -> int:
        """How many tokens before `at` are the text's last ones (up to COPY_RUN)."""
        seq, n, j = self.tokens, len(self.tokens), 0
        while j < COPY_RUN and at - 1 - j >= 0 and seq[at - 1 - j] == seq[n - 1 - j]:
            j += 1
        return j

    def _ready(self, tokens: list[int]) -> bool:
        """Synced with `tokens` and placed to draft: whether there is anything to draft."""
        self.sync(tokens)
        if self.cursor is None or (self.cursor >= len(self.tokens) and not self.pending):
            self._locate()
        return self.cursor is not None and (self.cursor < len(self.tokens) or bool(self.pending))

    def basis(self, tokens: list[int]) -> str | None:
        """How the place a draft would come from now was found (DraftPolicy's bases: "copy",
        "near", "long", "mid", "short"), or None when there is nothing to draft."""
        if not self._ready(tokens):
            return None
        if self.run >= COPY_RUN:
            return "copy"
        if self.origin == "near":
            return "near"
        return "short" if self.run < 4 else "mid" if self.run < 8 else "long"

    def follows(self, tokens: list[int]) -> bool:
        """Whether `tokens` go on with a copy the reply has followed for COPY_RUN tokens."""
        return self.basis(tokens) == "copy"

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to k tokens expected to follow `tokens`."""
        if not self._ready(tokens):
            return []
        seq, at = self.tokens, self.cursor
        assert at is not None
        out = self.pending[:k]
        while len(out) < k and at < len(seq):
            sub = self._sub_at(at, len(seq))
            if sub is not None:
                out.extend(sub[1])
                at += len(sub[0])
            else:
                out.append(seq[at])
                at += 1
        # A copy that reaches the text's end copies what it just drafted (the text repeats
        # itself: "a map of the valley, a map of the valley, ..."), as far as k.
        n = len(seq)
        while out and len(out) < k and at - n < len(out):
            out.append(out[at - n])
            at += 1
        return out[:k]

    def _near(self) -> int | None:
        """Just after the place the copy was left: where the last token (two, when it can)
        comes again within NEAR tokens, the nearest first."""
        seq, start = self.tokens, self.left
        assert start is not None
        stop = min(start + NEAR, len(seq) - 1)
        last, before = seq[-1], seq[-2] if len(seq) > 1 else None
        found = None
        for p in range(start, stop):
            if seq[p] == last:
                if p > start and seq[p - 1] == before:
                    found, self.run = p + 1, 2
                    break
                if found is None:
                    found, self.run = p + 1, 1
        if found is not None:
            self._learn(found, self.run)
        elif len(seq) - self.left_when > NEAR:
            self.left = None  # gone too far from it: an ordinary lookup from now on
        return found

    def _lookup(self) -> int | None:
        seq = self.tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(seq) <= n:
                continue
            found = self.index.get(tuple(seq[-n:]))
            if found:
                if self.left is not None:
                    i = bisect_left(found, self.left)
                    if i < len(found):
                        return found[i]
                return found[-1]
        return None


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
