"""The chat keys' commands on a conversation: new chat, regenerate, edit, continue, rewind, pick,
branches, copies and the next reply's switches (the screen's bindings name them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatapp.chat.session import PickError
from chatapp.engine.protocol import Candidate, Token
from chatapp.ui.conversation.reply import Reply

if TYPE_CHECKING:
    from chatapp.ui.conversation.pane import ConversationPane


class Commands:
    """What the chat's keys do to `pane`'s conversation: its ChatSession and its chat view
    change together; nothing while a reply streams (but where said)."""

    def __init__(self, pane: ConversationPane) -> None:
        self.pane = pane

    @property
    def idle(self) -> bool:
        return self.pane.reply is None

    # ---- the conversation -----------------------------------------------------------------

    async def new_chat(self) -> None:
        pane = self.pane
        if not self.idle:
            return
        pane.session.new_chat()
        pane.last_reply = None
        pane.branches.footers.clear()
        await pane.chat.clear()
        pane.panels.clear()
        pane.set_status("new chat")

    async def regenerate(self) -> None:
        """A new reply to the last turn; the old one stays as a branch (alt+left/right)."""
        pane = self.pane
        if not self.idle or not pane.session.conversation:
            return
        if pane.session.edits.set_aside_last_reply():
            items = pane.chat.items()
            if items and items[-1].role == "assistant":
                await items[-1].remove()
        await pane.generate()
        pane.branches.label()

    async def regenerate_many(self, n: int = 4) -> None:
        """N new replies to the last turn decoded together in one batch (the lesson: the
        weights are read once per step for all of them); they become branches of the message,
        the old reply one more."""
        pane = self.pane
        if not self.idle or not pane.session.conversation or not pane.session.ready:
            return
        pane.session.alternatives = n
        await self.regenerate()
        if not self.idle:
            pane.set_status(f"{n} replies decoding together in one batch… (Esc stops)")

    async def edit_last(self) -> None:
        pane = self.pane
        if not self.idle:
            return
        text = pane.session.edits.take_last_user()
        if text is None:
            return
        items = pane.chat.items()
        user_items = [i for i, it in enumerate(items) if it.role == "user"]
        for it in items[user_items[-1] :]:
            await it.remove()
        pane.prompt.text = text
        pane.prompt.focus()
        pane.set_status("editing your last message: Enter sends it again")

    async def continue_reply(self) -> None:
        pane, last = self.pane, self.pane.last_reply
        if not self.idle or last is None or not pane.session.conversation:
            return
        if not pane.session.edits.drop_last_reply():
            return
        await pane.generate(prefix=list(last.tokens), item=last.item)

    async def rewind(self) -> None:
        """Cut the last reply at the selected token and sample again from there (the old
        reply stays as a branch)."""
        pane, last = self.pane, self.pane.last_reply
        tokens = pane.panels.tokens
        cursor = tokens.strip.cursor
        if not self.idle or last is None or cursor is None or tokens.show_prompt:
            pane.notify("Select a token of the last reply in the Tokens tab first.")
            return
        pane.session.edits.set_aside_last_reply()
        await self._restart(last, list(last.tokens[:cursor]))

    async def pick(self, step: int | None, candidate: Candidate) -> None:
        """A candidate picked in the Next-token panel: the last reply goes on from it (cut
        after the tokens before that step); the reply it replaces stays as a branch."""
        pane, last = self.pane, self.pane.last_reply
        if not self.idle:
            pane.notify("A reply is still streaming: press Esc to stop it first.")
            return
        if last is None:
            pane.notify("Pick a token of a reply made in this session.")
            return
        if step is None:  # (the latest step shown: the reply's last token)
            step = len(last.tokens) - 1
        try:
            prefix = pane.session.edits.pick(step, candidate)
        except PickError as exc:
            pane.notify(str(exc))
            return
        await self._restart(last, prefix)
        pane.set_status(f"picked {candidate.text!r} at step {step}: generating…")

    async def _restart(self, last: Reply, prefix: list[Token]) -> None:
        """Generate the last reply again from `prefix`, in its message (rewind, pick)."""
        await last.item.finish("".join(t.text for t in prefix))
        await self.pane.generate(prefix=prefix, item=last.item)  # (the panels show its latest
        self.pane.branches.label()  # step: the one picked, until the next)

    async def branch(self, step: int) -> None:
        """Show the previous (-1) or next (+1) branch of the newest message that has branches;
        the conversation goes on from it."""
        pane = self.pane
        if not self.idle:
            pane.notify("A reply is still streaming: press Esc to stop it first.")
            return
        switched, last, status = await pane.branches.switch_newest(step)
        if switched:
            pane.last_reply = last
            if last is not None:
                pane.panels.look_at(last.live)
            else:
                pane.panels.clear()
        pane.set_status(status)

    # ---- copies -----------------------------------------------------------------------------

    def copy_reply(self) -> None:
        self.pane.clipboard.reply()

    def copy_code(self) -> None:
        self.pane.clipboard.code()

    def copy_conversation(self) -> None:
        self.pane.clipboard.conversation_markdown(getattr(self.pane.app, "model_label", ""))

    # ---- the next reply's switches ----------------------------------------------------------

    def toggle_thinking(self) -> None:
        """Thinking models: the template's reasoning switch, on or off from the next reply."""
        session = self.pane.session
        on = session.enable_thinking is False
        session.enable_thinking = on
        state = "on" if on else "off"
        self.pane.set_status(f"thinking {state} from the next reply (where the template has it)")

    def cycle_draft(self) -> None:
        """Speculative decoding for the next reply: off, n-gram drafts, the draft model (when
        one is loaded), off again."""
        session = self.pane.session
        info = session.info
        order = ["", "ngram"] + (["model"] if info and info.draft_model else [])
        current = session.speculation if session.speculation in order else ""
        session.speculation = order[(order.index(current) + 1) % len(order)]
        self.pane.panels.sampler.show_draft(session.speculation)
        self.pane.set_status(f"drafts: {session.speculation or 'off'} from the next reply")

    def mark_drafts(self) -> None:
        """Show the last reply with the tokens that came from accepted drafts marked (as text,
        not Markdown), or as Markdown again."""
        last = self.pane.last_reply
        if not self.idle or last is None:
            return
        if last.item.marked is not None:
            last.item.show_marked(None)
            return
        drafted = sum(t.drafted for t in last.tokens)
        last.item.show_marked([(t.text, t.drafted) for t in last.tokens])
        self.pane.set_status(
            f"{drafted} of {len(last.tokens)} tokens came from accepted drafts (alt+m: back)"
        )
