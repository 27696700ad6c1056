"""The conversation as a tree of turns: a message's branches and the path the chat goes on with."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from chatapp.engine.protocol import ChatMessage, Token
from chatapp.history.records import Message


@dataclass(eq=False)
class Turn:
    """One message of the tree. Turns with one parent are branches of each other; `chosen` is
    the child the conversation goes on with (None: the conversation ends here)."""

    message: ChatMessage
    """What the model is shown (a reply's answer, without its reasoning)."""
    text: str = ""
    """The whole text as stored (a reply's reasoning too)."""
    row: int | None = None
    """Its id in the history database (None: not saved)."""
    tokens: tuple[Token, ...] = ()
    """A reply made in this session: its tokens with their candidates (for picking a token)."""
    record: Message | None = None
    """A message loaded from the history: its stored stats."""
    parent: Turn | None = None
    children: list[Turn] = field(default_factory=list)
    chosen: Turn | None = None

    @property
    def role(self) -> str:
        return self.message.role

    def subtree(self) -> Iterator[Turn]:
        """This turn and every turn that follows it, on any branch."""
        todo = [self]
        while todo:  # (not recursive: a long chat is a deep tree)
            turn = todo.pop()
            yield turn
            todo.extend(turn.children)


class Tree:
    """The conversation's turns and their branches. `path()` is the conversation the model
    sees: from the first turn, each time the chosen branch."""

    def __init__(self) -> None:
        self.root = Turn(ChatMessage("system", ""))  # (not a message: the turns' common parent)
        self._set_aside: tuple[Turn, Turn] | None = None  # (parent, child) of set_aside()

    def path(self) -> list[Turn]:
        out: list[Turn] = []
        turn = self.root.chosen
        while turn is not None:
            out.append(turn)
            turn = turn.chosen
        return out

    @property
    def last(self) -> Turn:
        """The path's last turn (the root when the conversation is empty)."""
        turn = self.root
        while turn.chosen is not None:
            turn = turn.chosen
        return turn

    def add(self, turn: Turn) -> Turn:
        """Append a turn to the path; beside the ones set aside there, it is a new branch."""
        parent = self.last
        turn.parent = parent
        parent.children.append(turn)
        parent.chosen = turn
        self._set_aside = None
        return turn

    def add_beside(self, turn: Turn, sibling: Turn) -> Turn:
        """Add a turn as another branch of `sibling`'s parent (the chosen one stays)."""
        parent = sibling.parent or self.root
        turn.parent = parent
        parent.children.append(turn)
        return turn

    def set_aside(self) -> Turn | None:
        """End the path before its last turn, keeping that turn as a branch: the next `add`
        makes a sibling of it. Returns the turn (None when the path is empty)."""
        turn = self.last
        if turn.parent is None:
            return None
        turn.parent.chosen = None
        self._set_aside = (turn.parent, turn)
        return turn

    def restore(self) -> None:
        """Undo `set_aside` when nothing replaced the turn (a reply that wrote nothing)."""
        if self._set_aside is not None:
            parent, turn = self._set_aside
            if parent.chosen is None and turn in parent.children:
                parent.chosen = turn
            self._set_aside = None

    def cut(self, index: int) -> list[Turn]:
        """Take path[index] and all that follows it (every branch) out; returns those turns."""
        path = self.path()
        if not 0 <= index < len(path):
            return []
        turn = path[index]
        parent = turn.parent or self.root
        parent.children.remove(turn)
        parent.chosen = None
        self._set_aside = None
        return list(turn.subtree())

    def branch_of(self, index: int) -> tuple[int, int]:
        """(position from 1, count) of path[index] among its branches."""
        turn = self.path()[index]
        siblings = (turn.parent or self.root).children
        return siblings.index(turn) + 1, len(siblings)

    def switch(self, index: int, step: int) -> Turn | None:
        """Go on with the previous (-1) or next (+1) branch of path[index]; returns the turn now
        on the path, or None when there is no branch that way."""
        turn = self.path()[index]
        parent = turn.parent or self.root
        at = parent.children.index(turn) + step
        if not 0 <= at < len(parent.children):
            return None
        parent.chosen = parent.children[at]
        return parent.chosen

    def places(self) -> list[tuple[int, int]]:
        """(position from 1, count) among its branches of each turn of the path."""
        out = []
        for turn in self.path():
            siblings = (turn.parent or self.root).children
            out.append((siblings.index(turn) + 1, len(siblings)))
        return out

    def next_place(self) -> tuple[int, int] | None:
        """Where the reply being made will be among its branches, when it is made beside turns
        set aside (None: it is not)."""
        if self._set_aside is None or self._set_aside[0].chosen is not None:
            return None
        n = len(self._set_aside[0].children) + 1
        return n, n

    def branched(self) -> list[int]:
        """Indexes of the path's turns that have other branches."""
        return [i for i, t in enumerate(self.path()) if len((t.parent or self.root).children) > 1]

    @classmethod
    def linear(cls, messages: list[ChatMessage]) -> Tree:
        """A tree without branches, not saved (a conversation set from outside)."""
        tree = cls()
        for m in messages:
            tree.add(Turn(m, m.content))
        return tree

    @classmethod
    def from_records(cls, records: list[Message], shown: dict[int, ChatMessage]) -> Tree:
        """The tree of a saved conversation (Store.all_messages, in the order they were made);
        `shown` maps a message id to what the model is shown of it. Each parent goes on with
        its chosen child, else its newest one, as Store.messages does."""
        tree = cls()
        turns: dict[int, Turn] = {}
        for rec in records:
            parent = tree.root if rec.parent_id is None else turns.get(rec.parent_id)
            if parent is None:
                continue  # (a parent that is not in the list: nothing to hang it on)
            if rec.id not in shown:  # (a system row: what follows it hangs on its parent)
                turns[rec.id] = parent
                continue
            turn = Turn(shown[rec.id], rec.text, rec.id, record=rec, parent=parent)
            parent.children.append(turn)
            if rec.chosen or parent.chosen is None or not _is_chosen(parent.chosen):
                parent.chosen = turn
            turns[rec.id] = turn
        return tree


def _is_chosen(turn: Turn) -> bool:
    return turn.record is not None and turn.record.chosen
