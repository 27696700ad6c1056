"""The chat app: the conversation, the model and the flow from a submitted prompt to a reply."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from pathlib import Path

from textual import on, work

from chatapp.chat.attachments import Attachment
from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.config import Config, draft_source
from chatapp.engine.protocol import (
    ChatMessage,
    Engine,
    EngineError,
    GenerateRequest,
    Grammar,
    LoadOptions,
    Token,
)
from chatapp.history.store import StoreError
from chatapp.sampling import SamplerSettings
from chatapp.ui.attach_box import AttachBox
from chatapp.ui.branch_view import BranchView
from chatapp.ui.conversation_actions import ConversationActions
from chatapp.ui.copy_actions import CopyActions
from chatapp.ui.model_host import ModelHost
from chatapp.ui.panel_feed import PanelFeed
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.reply import Reply, stored_footer
from chatapp.ui.reply_events import ReplyEvents
from chatapp.ui.reply_report import ReplyReport
from chatapp.ui.screens.conversations import Choice, ConversationsScreen
from chatapp.ui.screens.grammar import CLEAR, GrammarScreen
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.streaming import stream_reply
from chatapp.ui.widgets.chat import MessageView
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.tokens import TokenStrip

STOP_GRACE_S = 3.0  # after Esc, a worker that has not stopped by then is killed


class ChatApp(ReplyEvents, ConversationActions, CopyActions, ModelHost):
    """Chat with a local model and watch tokens, speed and probabilities live. The
    conversation lives in a ChatSession; this class maps its results and the engine's events
    to widgets, and keys to its calls."""

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        *,
        settings: SamplerSettings | None = None,
        system_prompt: str = "",
        model_label: str = "",
        theme_name: str | None = None,
        remember_theme: Callable[[str], None] | None = None,
        history: ChatHistory | None = None,
        options: LoadOptions | None = None,
        startup_notes: Iterable[str] = (),
        config: Config | None = None,
        compare_options: LoadOptions | None = None,
    ) -> None:
        session = ChatSession(history or ChatHistory(None, self._warn), settings, system_prompt)
        super().__init__(
            engine_factory, session, options, config, settings, model_label, theme_name,
            remember_theme,
        )  # fmt: skip
        self.startup_notes = list(startup_notes)
        # How F10's comparison loads each file (GPU layers, threads, flash attention, repack):
        # config.toml and the command line, as `chatapp compare` (None: CPU-only defaults).
        self.compare_options = compare_options
        self.session.enable_thinking = self.config.think
        self.session.speculation = draft_source(self.config.draft)[0]
        self.report = ReplyReport()  # the Speed panel's note on each finished reply
        self.reply: Reply | None = None
        self.last_reply: Reply | None = None
        self._reply_ids = 0
        self._reply_pending = False  # a user turn waits for the model to (re)load
        self.first_paint_s: list[float] = []  # submit -> first token painted, per reply
        self.paint_log: list[tuple[float, int]] = []  # (UI time, tokens) per batch shown
        self.panels: PanelFeed  # (made on mount, from the panels' widgets)
        self.attached = AttachBox(self)  # files for the next message (`/file PATH`)

    # ---- the session's state, as the widgets and tests read it -----------------------------

    @property
    def conversation(self) -> list[ChatMessage]:
        return self.session.conversation

    @conversation.setter
    def conversation(self, messages: list[ChatMessage]) -> None:
        self.session.conversation = messages

    @property
    def settings(self) -> SamplerSettings:
        return self.session.settings

    @settings.setter
    def settings(self, settings: SamplerSettings) -> None:
        self.session.settings = settings

    @property
    def system_prompt(self) -> str:
        return self.session.system_prompt

    @property
    def history(self) -> ChatHistory:
        return self.session.history

    @history.setter
    def history(self, history: ChatHistory) -> None:
        self.session.history = history

    @property
    def ignore_eos(self) -> bool:
        return self.session.ignore_eos

    @ignore_eos.setter
    def ignore_eos(self, value: bool) -> None:
        self.session.ignore_eos = value

    @cached_property
    def branches(self) -> BranchView:
        """The messages' branch labels, and the chat pane when the branch is switched."""
        return BranchView(self.session, self.chat)

    # ---- start ----------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.panels = PanelFeed(self, self.token_panel, self.probs, self.stats_panel)
        self.panels.pacer = self.pacer
        self.setup_view()
        for note in self.startup_notes:
            self.notify(note, title="Config", severity="warning", timeout=10)
        self.start_engine()

    def _warn(self, message: str) -> None:
        self.notify(message, title="History", severity="warning", timeout=10)

    # ---- sending --------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    async def on_prompt_submitted(self, message: PromptInput.Submitted) -> None:
        text = self.attached.take(message.text)  # `/file PATH` lines attach files
        if text is None or not text.strip():
            return
        if self.reply is not None:
            self.notify("A reply is still streaming: press Esc to stop it first.")
            return
        problem = self.attached.ready(text)
        if problem:  # the message stays in the input, its files attached
            self.set_status(problem, error=True)
            return
        self.query_one("#prompt", PromptInput).clear()
        await self.send(text, self.attached.sent())

    async def send(self, text: str, files: Sequence[Attachment] = ()) -> None:
        """Add a user turn (with its attached files) and generate the reply to it."""
        self.session.add_user(text, files)
        await self.chat.add("user", self.session.conversation[-1].content)
        await self._generate()

    @property
    def busy(self) -> bool:
        return self.reply is not None

    def model_ready(self) -> None:
        self.pacer.use(self.cadence)
        self.sampler.show_draft(self.session.speculation)
        if self._reply_pending:
            self._reply_pending = False
            self.run_worker(self._generate(), exclusive=False)

    def model_failed(self) -> None:
        self._reply_pending = False

    def _wait_for_model(self) -> None:
        # The turn stays in the conversation and on screen; its reply starts once the model is
        # loaded (a dead worker is replaced first).
        self._reply_pending = True
        if not self._loading:
            self.start_engine()
        self.set_status("the model is loading; your message will be answered when it is ready")

    async def _generate(
        self, prefix: list[Token] | None = None, item: MessageView | None = None
    ) -> None:
        if not self.session.ready:
            self._wait_for_model()
            return
        self._reply_ids += 1
        if item is None:
            item = await self.chat.add("assistant")
        await item.start_stream()
        reply = Reply(self._reply_ids, item, time.perf_counter(), list(prefix or []))
        reply.initial_settings = self.settings
        self.reply = reply
        self._blink(False)  # a blinking cursor is two frames a second that the model pays for
        self.paint_log = []
        prepared = self.session.prepare(reply.tokens)
        split = self.session.draft.split
        reply.shown_thinking, reply.shown_answer = len(split.thinking), len(split.answer)
        self._show_left_out(item, prepared.dropped)
        reply.note = prepared.note  # said once: the status line while it streams and when done
        self.panels.settings = self.settings
        self.panels.start(reply)
        self.pacer.start()
        self.set_status("generating… (Esc stops)" + (f" · {reply.note}" if reply.note else ""))
        self._stream(prepared.request, reply.id)

    def _show_left_out(self, reply_item: MessageView, dropped: int) -> None:
        """Dim the messages the prompt leaves out (the oldest); the history keeps them."""
        items = [it for it in self.chat.items() if it is not reply_item]
        offset = len(self.conversation) - len(items)
        for i, it in enumerate(items):
            it.set_class(i + offset < dropped, "left-out")

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _stream(self, request: GenerateRequest, reply_id: int) -> None:
        pacer = self.pacer
        stream_reply(self.engine, request, reply_id, self.post_message, lambda: pacer.text_s)

    # ---- the conversation -----------------------------------------------------------------

    def action_stop(self) -> None:
        if self.reply is None:  # Esc with no reply: narrow, back from the panels to the chat;
            if not self.back_to_the_chat():  # else F8's Hub download, if one runs
                self.stop_download()
            return
        if self.engine is None:
            return
        self.session.cancel()
        self.set_status("stopping…")
        reply_id = self.reply.id
        self.set_timer(STOP_GRACE_S, lambda: self._kill_if_stuck(reply_id))

    def _kill_if_stuck(self, reply_id: int) -> None:
        if self.reply is not None and self.reply.id == reply_id:
            self.session.kill()  # the generation thread then reports the worker as crashed

    def action_toggle_thinking(self) -> None:
        """Thinking models: the template's reasoning switch, on or off from the next reply."""
        on = self.session.enable_thinking is False
        self.session.enable_thinking = on
        state = "on" if on else "off"
        self.set_status(f"thinking {state} from the next reply (where the template has it)")

    def action_cycle_draft(self) -> None:
        """Speculative decoding for the next reply: off, n-gram drafts, the draft model (when
        one is loaded), off again."""
        order = ["", "ngram"] + (["model"] if self.info and self.info.draft_model else [])
        current = self.session.speculation if self.session.speculation in order else ""
        self.session.speculation = order[(order.index(current) + 1) % len(order)]
        self.sampler.show_draft(self.session.speculation)
        self.set_status(f"drafts: {self.session.speculation or 'off'} from the next reply")

    def action_mark_drafts(self) -> None:
        """Show the last reply with the tokens that came from accepted drafts marked (as text,
        not Markdown), or as Markdown again."""
        last = self.last_reply
        if self.reply is not None or last is None:
            return
        if last.item.marked is not None:
            last.item.show_marked(None)
            return
        drafted = sum(t.drafted for t in last.tokens)
        last.item.show_marked([(t.text, t.drafted) for t in last.tokens])
        self.set_status(
            f"{drafted} of {len(last.tokens)} tokens came from accepted drafts (alt+m: back)"
        )

    def on_sampler_panel_draft_pressed(self, message: SamplerPanel.DraftPressed) -> None:
        self.action_cycle_draft()

    async def action_new_chat(self) -> None:
        if self.reply is not None:
            return
        self.session.new_chat()
        self.last_reply = None
        self.branches.footers.clear()
        await self.chat.clear()
        self.token_panel.reset_reply()
        self.probs.candidates = ()
        self.set_status("new chat")

    # ---- dialogs --------------------------------------------------------------------------

    def action_system_prompt(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self.session.set_system_prompt(text)
                self.set_status("system prompt set" if text else "system prompt cleared")

        self.push_screen(SystemPromptScreen(self.system_prompt, self.config), done)

    def action_pick_grammar(self) -> None:
        def done(choice: Grammar | str | None) -> None:
            if choice is not None:
                self.session.grammar = None if choice == CLEAR else choice
                self.set_status(
                    "replies are free again" if choice == CLEAR else "from the next reply"
                )

        self.push_screen(GrammarScreen(self.session.grammar), done)

    def status_tag(self) -> str:
        grammar = self.session.grammar
        return f"⊘ {grammar.source}" if grammar is not None else ""

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
        self.branches.label()
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

    # ---- panels ---------------------------------------------------------------------------

    @on(SamplerPanel.SettingsChanged)
    def on_settings_changed(self, message: SamplerPanel.SettingsChanged) -> None:
        try:
            live = self.session.change_settings(message.settings)
        except EngineError as exc:
            self.sampler.set_status(str(exc))
            return
        self.sampler.set_status(
            "sent: applies from the next token…" if live else "applies to the next reply"
        )

    @on(TokenStrip.Selected, "#reply-tokens")
    def on_reply_token_selected(self, message: TokenStrip.Selected) -> None:
        reply = self.reply or self.last_reply
        if self.token_panel.show_prompt or reply is None:
            return
        if 0 <= message.index < len(reply.tokens):
            tok = reply.tokens[message.index]
            self.probs.step = message.index
            self.probs.settings = reply.settings_at(message.index, self.settings)
            self.probs.chosen = tok.id
            self.probs.candidates = tok.candidates
