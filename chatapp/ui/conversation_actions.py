"""The chat app's edits of the conversation: regenerate, edit, continue, rewind, pick, branches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatapp.chat.session import PickError
from chatapp.ui.branch_view import show_tokens
from chatapp.ui.prompt_input import PromptInput

if TYPE_CHECKING:
    from chatapp.engine.protocol import Token
    from chatapp.ui.reply import Reply
    from chatapp.ui.widgets.probs import ProbPanel


class ConversationActions:
    """ChatApp's actions that change what the conversation holds: a new reply to the last turn
    (one or N together), the last message taken back to edit, the last reply continued, cut at
    a token or restarted from a picked candidate, and the branches walked.

    A mixin of ChatApp: it uses the app's session, chat, replies, panels and `_generate`."""

    async def action_regenerate(self) -> None:
        """A new reply to the last turn; the old one stays as a branch (alt+left/right)."""
        if self.reply is not None or not self.conversation:
            return
        if self.session.set_aside_last_reply():
            items = self.chat.items()
            if items and items[-1].role == "assistant":
                await items[-1].remove()
        await self._generate()
        self.branches.label()

    async def action_regenerate_many(self, n: int = 4) -> None:
        """N new replies to the last turn decoded together in one batch (the lesson: the
        weights are read once per step for all of them); they become branches of the message,
        the old reply one more."""
        if self.reply is not None or not self.conversation or not self.session.ready:
            return
        self.session.alternatives = n
        await self.action_regenerate()
        if self.reply is not None:
            self.set_status(f"{n} replies decoding together in one batch… (Esc stops)")

    async def action_edit_last(self) -> None:
        if self.reply is not None:
            return
        text = self.session.take_last_user()
        if text is None:
            return
        items = self.chat.items()
        user_items = [i for i, it in enumerate(items) if it.role == "user"]
        for it in items[user_items[-1] :]:
            await it.remove()
        prompt = self.query_one("#prompt", PromptInput)
        prompt.text = text
        prompt.focus()
        self.set_status("editing your last message: Enter sends it again")

    async def action_continue_reply(self) -> None:
        last = self.last_reply
        if self.reply is not None or last is None or not self.conversation:
            return
        if not self.session.drop_last_reply():
            return
        await self._generate(prefix=list(last.tokens), item=last.item)

    async def action_rewind(self) -> None:
        """Cut the last reply at the selected token and sample again from there (the old
        reply stays as a branch)."""
        last = self.last_reply
        cursor = self.token_panel.strip.cursor
        if self.reply is not None or last is None or cursor is None or self.token_panel.show_prompt:
            self.notify("Select a token of the last reply in the Tokens tab first.")
            return
        self.session.set_aside_last_reply()
        await self._restart(last, list(last.tokens[:cursor]))

    async def on_prob_panel_picked(self, message: ProbPanel.Picked) -> None:
        """A candidate picked in the Next-token panel: the last reply goes on from it (cut
        after the tokens before that step); the reply it replaces stays as a branch."""
        last = self.last_reply
        if self.reply is not None:
            self.notify("A reply is still streaming: press Esc to stop it first.")
            return
        if last is None:
            self.notify("Pick a token of a reply made in this session.")
            return
        step = message.step
        if step is None:  # (the latest step shown: the reply's last token)
            step = len(last.tokens) - 1
        try:
            prefix = self.session.pick(step, message.candidate)
        except PickError as exc:
            self.notify(str(exc))
            return
        await self._restart(last, prefix)
        self.set_status(f"picked {message.candidate.text!r} at step {step}: generating…")

    async def _restart(self, last: Reply, prefix: list[Token]) -> None:
        """Generate the last reply again from `prefix`, in its message (rewind, pick)."""
        await last.item.finish("".join(t.text for t in prefix))
        await self._generate(prefix=prefix, item=last.item)
        if prefix and self.reply is not None:  # the latest step is the one picked, until the next
            self.probs.chosen, self.probs.candidates = prefix[-1].id, prefix[-1].candidates
        self.branches.label()

    async def action_branch_prev(self) -> None:
        await self._switch_branch(-1)

    async def action_branch_next(self) -> None:
        await self._switch_branch(+1)

    async def _switch_branch(self, step: int) -> None:
        """Show the previous or next branch of the newest message that has branches; the
        conversation goes on from it."""
        if self.reply is not None:
            self.notify("A reply is still streaming: press Esc to stop it first.")
            return
        switched, last, status = await self.branches.switch_newest(step)
        if switched:
            self.last_reply = last
            show_tokens(self.token_panel, self.probs, last.tokens if last is not None else [])
        self.set_status(status)
