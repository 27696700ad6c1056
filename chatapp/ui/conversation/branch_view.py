"""The chat pane's side of branches: which branch each message is, and the messages shown
again from a message whose branch was switched."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatapp.chat.branches import Turn
from chatapp.chat.live_reply import LiveReply
from chatapp.ui.conversation.reply import Reply, stored_footer
from chatapp.ui.widgets.chat import MessageView

if TYPE_CHECKING:
    from chatapp.chat.session import ChatSession
    from chatapp.ui.widgets.chat import ChatView


class BranchView:
    """Keeps the chat pane's messages labelled with their branches ("branch 2/3") and shows a
    switched branch. The stats line of each reply made in this session is kept here, so a
    branch switched back to shows it again."""

    def __init__(self, session: ChatSession, chat: ChatView) -> None:
        self.session = session
        self.chat = chat
        self.footers: dict[Turn, str] = {}
        self._reply_ids = 0

    def finished(self, footer: str) -> None:
        """The reply just finished (the conversation's last turn) has this stats line."""
        path = self.session.tree.path()
        if path and path[-1].role == "assistant":
            self.footers[path[-1]] = footer
        self.label()

    def label(self) -> None:
        """Label each message shown with its place among its branches."""
        places = self.session.edits.branch_places()
        items = self.chat.items()
        for item, (at, count) in zip(reversed(items), reversed(places), strict=False):
            item.set_branch(f"branch {at}/{count}" if count > 1 else "")

    async def switch_newest(self, step: int) -> tuple[bool, Reply | None, str]:
        """Switch the newest message that has branches to its previous (-1) or next (+1)
        one: whether it switched, the last reply (as `switch`) and a status line."""
        points = self.session.edits.branch_points()
        if not points:
            return False, None, "no branches yet: pick a token in the Next token tab, or regenerate"
        switched, last = await self.switch(points[-1], step)
        if not switched:
            return False, None, f"no {'earlier' if step < 0 else 'later'} branch"
        at, count = self.session.edits.branch_of(points[-1])
        return True, last, f"message {points[-1] + 1}: branch {at}/{count}"

    async def switch(self, index: int, step: int) -> tuple[bool, Reply | None]:
        """Switch turn `index` to its previous (-1) or next (+1) branch and show the messages
        from there again. Returns whether it switched, and the last reply (for rewind, continue
        and the token panels) when it was made in this session."""
        items = self.chat.items()
        offset = len(self.session.conversation) - len(items)  # (older ones are not mounted)
        if not self.session.edits.switch_branch(index, step):
            return False, None
        for item in items[max(0, index - offset) :]:
            await item.remove()
        path = self.session.tree.path()
        views = [MessageView(t.role, t.text, self._footer(t)) for t in path[max(index, offset) :]]
        await self.chat.add_items(views)
        self.label()
        last = path[-1] if path else None
        if last is None or last.role != "assistant" or not last.tokens or not views:
            return True, None
        self._reply_ids -= 1  # (ids of their own, below those of streamed replies)
        return True, Reply(self._reply_ids, views[-1], LiveReply(list(last.tokens)))

    def _footer(self, turn: Turn) -> str:
        if turn in self.footers:
            return self.footers[turn]
        return stored_footer(turn.record) if turn.record is not None else ""
