"""Editing a conversation's turns: drop, set aside, pick a token, walk and switch branches."""

from __future__ import annotations

import codecs
import math
from typing import Protocol

from chatapp.chat.branches import Tree
from chatapp.chat.recorder import ChatHistory
from chatapp.engine.protocol import Candidate, Token
from chatapp.errors import ChatappError


class PickError(ChatappError):
    """A token cannot be picked there (no reply with tokens, a step out of range, streaming)."""


class Edited(Protocol):
    """What the edits read of a conversation (a ChatSession): its tree, its history rows, and
    whether a reply streams. Read anew at each edit: the session replaces its tree (new chat,
    resume) and may be handed another history."""

    @property
    def tree(self) -> Tree: ...

    @property
    def history(self) -> ChatHistory: ...

    @property
    def streaming(self) -> bool: ...


class ConversationEdits:
    """The edits of a conversation's tree that keep its history rows in step (a ChatSession's
    `edits`); none while a reply streams."""

    def __init__(self, conversation: Edited) -> None:
        self.conversation = conversation

    @property
    def tree(self) -> Tree:
        return self.conversation.tree

    @property
    def history(self) -> ChatHistory:
        return self.conversation.history

    @property
    def streaming(self) -> bool:
        return self.conversation.streaming

    def drop_last_reply(self) -> bool:
        """Take the last reply out for good (continue replaces it with its longer self);
        False if there is none."""
        path = self.tree.path()
        if not path or path[-1].role != "assistant":
            return False
        self.history.delete([t.row for t in self.tree.cut(len(path) - 1)])
        return True

    def set_aside_last_reply(self) -> bool:
        """Take the last reply out of the conversation but keep it as a branch: the next reply
        (regenerate, rewind, pick) is made beside it. False if there is none."""
        if self.tree.last.role != "assistant":
            return False
        return self.tree.set_aside() is not None

    def pick(self, step: int, candidate: Candidate) -> list[Token]:
        """Pick the next token yourself: the last reply is set aside as a branch, and the new
        one starts with its first `step` tokens and then `candidate` (one of that step's). Returns
        the prefix to `prepare` with (the engine reuses the KV cache up to the picked token)."""
        last = self.tree.last
        if self.streaming:
            raise PickError("a reply is streaming: stop it first (Esc)")
        if last.role != "assistant" or not last.tokens:
            raise PickError("pick a token in a reply made in this session")
        if not 0 <= step < len(last.tokens):
            raise PickError(f"the reply has no step {step} (it has {len(last.tokens)} tokens)")
        kept = list(last.tokens[:step])
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        for tok in kept:  # (a character split across tokens: the picked piece completes it)
            decoder.decode(tok.piece)
        old = last.tokens[step]
        picked = Token(
            step, candidate.id, candidate.piece, decoder.decode(candidate.piece), old.t,
            math.log(candidate.p) if candidate.p > 0 else None, old.candidates,
        )  # fmt: skip
        self.set_aside_last_reply()
        return [*kept, picked]

    def branch_points(self) -> list[int]:
        """Indexes in the conversation of the turns that have other branches."""
        return self.tree.branched()

    def branch_of(self, index: int) -> tuple[int, int]:
        """(which, of how many) branches the conversation's turn `index` is."""
        return self.tree.branch_of(index)

    def branch_places(self) -> list[tuple[int, int]]:
        """(which, of how many) branches each turn of the conversation is; then, while a reply
        made beside others streams, its own place."""
        places = self.tree.places()
        upcoming = self.tree.next_place() if self.streaming else None
        return places + [upcoming] if upcoming else places

    def switch_branch(self, index: int, step: int) -> bool:
        """Go on from the previous (-1) or next (+1) branch of turn `index` (the turns after it
        become that branch's); False when there is none that way or a reply is streaming."""
        if self.streaming:
            return False
        turn = self.tree.switch(index, step)
        if turn is None:
            return False
        self.history.choose(turn.row)
        return True

    def take_last_user(self) -> str | None:
        """Take the last user turn and everything after it out, returning its text (edit)."""
        path = self.tree.path()
        idx = max((i for i, t in enumerate(path) if t.role == "user"), default=None)
        if idx is None:
            return None
        text = path[idx].message.content
        self.history.delete([t.row for t in self.tree.cut(idx)])
        return text
