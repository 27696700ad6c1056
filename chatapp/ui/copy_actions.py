"""The chat's Copy actions (the last reply, its code blocks one at a time, the conversation,
through the terminal's clipboard: OSC 52) and the file picker that attaches files."""

from __future__ import annotations

from chatapp.chat import copying


class CopyActions:
    """Mixed into ChatApp: reads its conversation, writes with Textual's copy_to_clipboard."""

    _code_turn: tuple[int, int] = (-1, -1)  # (the reply's length, the block copied last)

    def _copy(self, text: str, what: str) -> None:
        if not copying.fits_clipboard(text):  # a terminal would drop or cut it: say so
            self.notify(copying.too_large(what, text), title="Not copied", severity="warning")
            return
        self.copy_to_clipboard(text)
        self.notify(copying.describe(what, text), title="Copied", timeout=4)

    def action_attach_files(self) -> None:
        """The file picker: each file chosen joins the next message, as `/file PATH` does."""
        from pathlib import Path

        from chatapp.ui.screens.file_picker import FilePickerScreen

        self.push_screen(FilePickerScreen(Path.cwd(), self.attached.add))

    def action_copy_reply(self) -> None:
        text = copying.last_reply(self.conversation)
        if not text:
            self.notify("There is no reply to copy yet.")
            return
        self._copy(text, "the reply")

    def action_copy_code(self) -> None:
        """The last reply's code blocks, one per press (the first again after the last)."""
        text = copying.last_reply(self.conversation) or ""
        blocks = copying.code_blocks(text)
        if not blocks:
            self.notify("The last reply has no code block.")
            return
        size, last = self._code_turn
        index = (last + 1) % len(blocks) if size == len(text) else 0
        self._code_turn = (len(text), index)
        what = "the code block" if len(blocks) == 1 else f"code block {index + 1} of {len(blocks)}"
        self._copy(blocks[index], what)

    def action_copy_conversation(self) -> None:
        if not self.conversation:
            self.notify("The conversation is empty.")
            return
        title = getattr(self, "model_label", "") or ""
        text = copying.conversation_markdown(
            self.conversation, f"Chat with {title}" if title else ""
        )
        self._copy(text, "the conversation as Markdown")
