"""The chat app's actions on the conversation and the view (a mixin of ChatApp)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from textual.widgets import TabbedContent

from chatapp.engine.protocol import LoadOptions
from chatapp.history.store import StoreError
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.reply import stored_footer
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.conversations import Choice, ConversationsScreen
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.model_card import ModelCardScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.widgets.chat import MessageView

if TYPE_CHECKING:
    from chatapp.ui.app import ChatApp

    _Base = ChatApp
else:
    _Base = object


class ChatActions(_Base):
    """Regenerate, edit, continue, rewind, new chat, history, and the view toggles."""

    async def action_regenerate(self) -> None:
        if self.reply is not None or not self.conversation:
            return
        if self.session.drop_last_reply():
            items = self.chat.items()
            if items and items[-1].role == "assistant":
                await items[-1].remove()
        await self._generate()

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
        """Cut the last reply at the selected token and sample again from there."""
        last = self.last_reply
        cursor = self.token_panel.strip.cursor
        if self.reply is not None or last is None or cursor is None or self.token_panel.show_prompt:
            self.notify("Select a token of the last reply in the Tokens tab first.")
            return
        self.session.drop_last_reply()
        keep = list(last.tokens[:cursor])
        await last.item.finish("".join(t.text for t in keep))
        await self._generate(prefix=keep, item=last.item)

    async def action_new_chat(self) -> None:
        if self.reply is not None:
            return
        self.session.new_chat()
        self.last_reply = None
        await self.chat.clear()
        self.token_panel.reset_reply()
        self.probs.candidates = ()
        self.set_status("new chat")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self._binding_rows()))

    def action_system_prompt(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self.session.set_system_prompt(text)
                self.set_status("system prompt set" if text else "system prompt cleared")

        self.push_screen(SystemPromptScreen(self.system_prompt), done)

    def action_conversations(self) -> None:
        if self.reply is not None:
            self.notify("Stop the reply first (Esc).")
            return
        if self.history.store is None:
            self.notify("History is not available in this session.", severity="warning")
            return

        async def done(choice: Choice | None) -> None:
            if choice is None:
                return
            await self.action_new_chat()
            if choice.conversation_id is not None:
                await self.resume(choice.conversation_id)

        self.push_screen(ConversationsScreen(self.history.store), done)

    async def resume(self, conversation_id: int) -> None:
        """Open a saved conversation where it was: its messages, system prompt, settings, model."""
        try:
            conv, kept = self.session.resume(conversation_id)
        except StoreError as exc:
            self.notify(str(exc), severity="error")
            return
        if conv.sampler is not None:
            self.sampler.settings = conv.sampler
            self.sampler.sync_sliders()
        await self.chat.add_items([MessageView(m.role, m.text, stored_footer(m)) for m in kept])
        self.set_status(f"resumed: {conv.title} ({len(kept)} messages)")
        loaded = self.info.path if self.info else None
        if conv.model_path and self.options and conv.model_path != loaded:
            if Path(conv.model_path).is_file():
                self.switch_model(dataclasses.replace(self.options, model_path=conv.model_path))
            else:
                self.notify(
                    f"this chat was made with {conv.model_path}, which is gone; "
                    "continuing with the loaded model",
                    severity="warning",
                )

    def switch_model(self, options: LoadOptions) -> None:
        """Load another model file (the conversation stays)."""
        from chatapp.engine.factory import make_engine
        from chatapp.ui.streaming import WORKER_NICE

        self.options = options
        self.engine_factory = lambda: make_engine(options, nice=WORKER_NICE)
        self.start_engine()

    def action_toggle_side(self) -> None:
        side = self.query_one("#side")
        side.display = not side.display

    def action_toggle_prompt_tokens(self) -> None:
        self.query_one(TabbedContent).active = "tab-tokens"
        self.token_panel.show_prompt = not self.token_panel.show_prompt

    def action_toggle_ids(self) -> None:
        self.token_panel.toggle_ids()

    def action_focus_sampler(self) -> None:
        self.query_one("#slider-temperature").focus()

    def action_next_theme(self) -> None:
        names = sorted(self.available_themes)
        ours = [n for n in names if n.startswith("chatapp-")] or names
        i = ours.index(self.theme) if self.theme in ours else -1
        self.theme = ours[(i + 1) % len(ours)]
        self.notify(f"theme: {self.theme}")

    def action_pick_model(self) -> None:
        if self.options is None:
            self.notify("Connected to a server: there is no local model to switch.")
            return
        if self.reply is not None or self._loading:
            self.notify("Wait for the reply (Esc stops it) or the load to finish first.")
            return

        def done(options: LoadOptions | None) -> None:
            if options is not None:
                self.model_label = Path(options.model_path).name
                self.switch_model(options)  # the conversation stays

        self.push_screen(ModelPickerScreen(self.options, config_dirs=self.config.model_dirs), done)

    def action_model_card(self) -> None:
        if self.info is None:
            self.notify("No model is loaded yet.")
            return
        self.push_screen(ModelCardScreen.from_info(self.info))

    def action_compare_models(self) -> None:
        source = self.info.path if self.info else (self.options and self.options.model_path)
        self.push_screen(CompareScreen(source=source or None))
