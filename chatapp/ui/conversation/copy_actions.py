"""The chat's Copy actions: the last reply, its code blocks one at a time, the conversation,
through the terminal's clipboard (OSC 52)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from chatapp.chat import copying
from chatapp.engine.protocol import ChatMessage

if TYPE_CHECKING:
    from textual.app import App
    from textual.notifications import SeverityLevel

    from chatapp.chat.session import ChatSession


class Pane(Protocol):
    """What copying uses of the conversation pane it serves."""

    session: ChatSession

    @property
    def app(self) -> App: ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...


class Clipboard:
    """Copies from a conversation pane's session with Textual's copy_to_clipboard."""

    def __init__(self, pane: Pane) -> None:
        self.pane = pane
        self._code_turn: tuple[int, int] = (-1, -1)  # (the reply's length, the block copied last)

    @property
    def conversation(self) -> list[ChatMessage]:
        return self.pane.session.conversation

    def _copy(self, text: str, what: str) -> None:
        if not copying.fits_clipboard(text):  # a terminal would drop or cut it: say so
            self.pane.notify(copying.too_large(what, text), title="Not copied", severity="warning")
            return
        self.pane.app.copy_to_clipboard(text)
        self.pane.notify(copying.describe(what, text), title="Copied", timeout=4)

    def reply(self) -> None:
        text = copying.last_reply(self.conversation)
        if not text:
            self.pane.notify("There is no reply to copy yet.")
            return
        self._copy(text, "the reply")

    def code(self) -> None:
        """The last reply's code blocks, one per press (the first again after the last)."""
        text = copying.last_reply(self.conversation) or ""
        blocks = copying.code_blocks(text)
        if not blocks:
            self.pane.notify("The last reply has no code block.")
            return
        size, last = self._code_turn
        index = (last + 1) % len(blocks) if size == len(text) else 0
        self._code_turn = (len(text), index)
        what = "the code block" if len(blocks) == 1 else f"code block {index + 1} of {len(blocks)}"
        self._copy(blocks[index], what)

    def conversation_markdown(self, title: str) -> None:
        if not self.conversation:
            self.pane.notify("The conversation is empty.")
            return
        text = copying.conversation_markdown(
            self.conversation, f"Chat with {title}" if title else ""
        )
        self._copy(text, "the conversation as Markdown")
