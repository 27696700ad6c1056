"""The chat's screen: the conversation pane beside the side panels, the chat's keys (quiet under
a dialog, as a screen's bindings are) and what only changes the view."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, TabbedContent, TabPane

from chatapp.chat.session import ChatSession
from chatapp.config import Config
from chatapp.engine.protocol import EngineError, Grammar
from chatapp.history.store import StoreError
from chatapp.models.compare_result import CompareResult
from chatapp.sampling import SamplerSettings
from chatapp.ui.conversation.pane import ConversationPane
from chatapp.ui.conversation.reply import stored_footer
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.pacing import settle_gc
from chatapp.ui.screens.conversations import Choice, ConversationsScreen
from chatapp.ui.screens.file_picker import FilePickerScreen
from chatapp.ui.screens.grammar import CLEAR, GrammarScreen
from chatapp.ui.screens.lesson_view import LessonView
from chatapp.ui.screens.panel_view import PanelView
from chatapp.ui.screens.system_prompt import SystemPromptScreen
from chatapp.ui.streaming import ReplyStream
from chatapp.ui.widgets.chat import MessageView
from chatapp.ui.widgets.inside import InsidePanel
from chatapp.ui.widgets.lesson_strip import LessonStrip
from chatapp.ui.widgets.limits_panel import LimitsPanel
from chatapp.ui.widgets.live_panel import LivePanel, LoadedModel
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.steer_panel import SteerPanel
from chatapp.ui.widgets.tokens import TokenPanel, TokenStrip


def _key(key: str, action: str, description: str, id: str, show: bool = True) -> Binding:
    """A chat key: a priority binding (it wins over the message box's own ctrl and alt keys),
    quiet under a dialog (a screen's bindings are)."""
    return Binding(key, action, description, show=show, id=id, priority=True)


class ChatScreen(Screen):
    """The chat: its layout, its keys, its dialogs and the view's toggles. The conversation
    lives in the ConversationPane (`pane`): the keys that act on it name its commands
    (`pane('regenerate')`), and the live panels laid out here join it as they mount. The side
    panels' view is its PanelView (`view`): the keys that only change what is shown name its
    methods (`view('toggle_side')`)."""

    BINDINGS = [
        Binding("escape", "stop", "Stop", id="chat.stop"),
        _key("ctrl+r", "pane('regenerate')", "Regenerate", "chat.regenerate"),
        _key("ctrl+e", "pane('edit_last')", "Edit last", "chat.edit_last"),
        _key("ctrl+o", "pane('continue_reply')", "Continue", "chat.continue"),
        _key("ctrl+w", "pane('rewind')", "Rewind here", "chat.rewind"),
        _key("alt+left", "pane('branch', -1)", "Previous branch", "chat.branch_prev", show=False),
        _key("alt+right", "pane('branch', 1)", "Next branch", "chat.branch_next", show=False),
        _key("ctrl+n", "pane('new_chat')", "New chat", "chat.new"),
        _key("f1", "app.help", "Help", "app.help"),
        _key("f2", "system_prompt", "System", "chat.system_prompt"),
        _key("f3", "view('toggle_side')", "Panels", "view.toggle_side"),
        _key("f4", "view('toggle_prompt_tokens')", "Prompt tokens", "view.prompt_tokens"),
        _key("f5", "view('toggle_ids')", "Token ids", "view.token_ids"),
        _key("f6", "view('focus_sampler')", "Sampler", "view.focus_sampler"),
        _key("ctrl+t", "app.next_theme", "Theme", "view.next_theme"),
        _key("f7", "conversations", "History", "chat.history"),
        _key("ctrl+b", "pane('toggle_thinking')", "Think on/off", "chat.think", show=False),
        _key(
            "alt+r",
            "pane('regenerate_many', 4)",
            "Regenerate x4",
            "chat.regenerate_many",
            show=False,
        ),  # fmt: skip
        _key("alt+m", "pane('mark_drafts')", "Drafts in the reply", "chat.mark_drafts", show=False),
        _key("alt+d", "pane('cycle_draft')", "Drafts off/ngram/model", "chat.draft", show=False),
        _key("alt+f", "attach_files", "Attach files", "chat.attach", show=False),
        _key("alt+c", "pane('copy_reply')", "Copy the reply", "chat.copy_reply", show=False),
        _key(
            "alt+k",
            "pane('copy_code')",
            "Copy a code block (again: the next)",
            "chat.copy_code",
            show=False,
        ),  # fmt: skip
        _key(
            "alt+a",
            "pane('copy_conversation')",
            "Copy the conversation (Markdown)",
            "chat.copy_conversation",
            show=False,
        ),  # fmt: skip
        _key("alt+v", "view('steer')", "Steer: control vectors", "chat.steer", show=False),
        _key(
            "alt+l",
            "view('limits')",
            "Limits: speed against this machine",
            "chat.limits",
            show=False,
        ),
        _key("alt+e", "lesson('start')", "Lesson: how the model writes", "chat.lesson", show=False),
        _key("right,n", "lesson('next')", "Lesson: next step", "lesson.next", show=False),
        _key("left,p", "lesson('back')", "Lesson: step back", "lesson.back", show=False),
        _key("alt+g", "pick_grammar", "JSON schema / grammar", "chat.grammar", show=False),
        _key(
            "alt+s",
            "view('toggle_surprise')",
            "Surprise: colour the reply's tokens by p",
            "chat.surprise",
            show=False,
        ),  # fmt: skip
        _key("f8", "app.pick_model", "Models", "models.pick"),
        _key("f9", "app.model_card", "Model card", "models.card"),
        _key("f10", "app.compare_models", "Compare", "models.compare"),
        _key("ctrl+k", "app.restart_engine", "Restart model", "engine.restart", show=False),
    ]

    def __init__(
        self,
        session: ChatSession,
        slot: EngineSlot,
        config: Config,
        settings: SamplerSettings | None = None,
    ) -> None:
        super().__init__()
        self.slot = slot
        self.config = config  # its presets and model_dirs are used here
        self.initial_settings = settings or SamplerSettings()
        self.pane = ConversationPane(session, slot, config, id="left")
        self.view = PanelView(self)
        self.lesson = LessonView(self, self.view)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield self.pane
            # (docked atop #main; from 160 columns, a column)
            yield LessonStrip(self.session, id="lesson")
            with Vertical(id="side"):
                stats = StatsPanel(id="stats")
                stats.border_title = "Speed"
                yield stats
                with TabbedContent(id="tabs", initial="tab-probs"):
                    with TabPane("Next token", id="tab-probs"):
                        with VerticalScroll():
                            yield ProbPanel(id="probs")
                    with TabPane("Tokens", id="tab-tokens"):
                        yield TokenPanel(id="tokens")
                    with TabPane("Inside", id="tab-inside"):
                        yield InsidePanel(id="inside", engine=lambda: self.slot.engine)
                    with TabPane("Steer", id="tab-steer"):
                        yield SteerPanel(self.session, lambda: self.slot.engine, id="steer")
                    with TabPane("Limits", id="tab-limits"):
                        yield LimitsPanel(id="limits")
                sampler = SamplerPanel(
                    self.initial_settings, presets=self.config.all_presets(), id="sampler"
                )
                sampler.border_title = "Sampler (live)"
                yield sampler
        yield Footer()

    def on_mount(self) -> None:
        self.view.probs.settings = self.initial_settings
        self.query_one("#prompt").focus()
        self.screen_layout_refresh_signal.subscribe(self, self.view.focus_in_sight)
        self.call_after_refresh(settle_gc)
        self.watch(self.pane, "model", self._steer_follows, init=False)
        self.pane.start_model()
        if self.lesson.begin_at is not None:
            self.call_after_refresh(self.lesson.start, self.lesson.begin_at)

    @property
    def session(self) -> ChatSession:
        """The conversation's session: its pane's."""
        return self.pane.session

    @property
    def sampler(self) -> SamplerPanel:
        return self.pane.panels.sampler

    def on_live_panel_joined(self, message: LivePanel.Joined) -> None:
        """A live panel laid out here: the conversation feeds it its reply and its model."""
        message.stop()
        self.pane.panels.join(message.panel)

    def _steer_follows(self, model: LoadedModel | None) -> None:
        if model is not None and model.state == "ready" and model.info is not None:
            self.query_one("#steer", SteerPanel).model_ready(model.info)

    # ---- keys passed to the conversation ------------------------------------------------------

    async def action_stop(self) -> None:
        """Esc: stop the reply; with none, leave the lesson; else narrow: back from the panels
        to the chat; else stop F8's Hub download, if one runs."""
        if self.pane.stop() or self.lesson.leave():
            return
        if not self.view.back_to_the_chat():
            await self.run_action("app.stop_download")

    async def action_pane(self, command: str, *args: object) -> None:
        """A chat key's command on the conversation (ConversationPane.command)."""
        await self.pane.command(command, *args)

    def action_view(self, name: str) -> None:
        """A view key's toggle of the side panels (a method of PanelView)."""
        getattr(self.view, name)()

    def action_lesson(self, name: str) -> None:
        """A lesson key: start, next or back (LessonView's methods)."""
        getattr(self.lesson, name)()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The lesson's step keys act only while it is on and they would type nothing (else
        the key goes on to the message box)."""
        if action == "lesson" and parameters and parameters[0] != "start":
            return self.lesson.keys_free()
        return True

    def action_attach_files(self) -> None:
        """The file picker: each file chosen joins the next message, as `/file PATH` does."""
        self.app.push_screen(FilePickerScreen(Path.cwd(), self.pane.attached.add))

    async def on_prob_panel_picked(self, message: ProbPanel.Picked) -> None:
        await self.pane.commands.pick(message.step, message.candidate)

    def on_sampler_panel_draft_pressed(self, message: SamplerPanel.DraftPressed) -> None:
        self.pane.commands.cycle_draft()

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

    def on_reply_stream_steering_took_effect(self, message: ReplyStream.SteeringTookEffect) -> None:
        self.query_one("#steer", SteerPanel).applied(message.event)

    # ---- what the lesson quotes: kept by the session as it is measured ----------------------

    def on_inside_panel_captured(self, message: InsidePanel.Captured) -> None:
        """A logit lens ran in the Inside tab (the lesson's inside step quotes it)."""
        if message.found is not None:
            self.session.measured.lens = message.found
            self.lesson.strip.measured_changed()

    def on_steer_panel_metered(self, message: SteerPanel.Metered) -> None:
        """The concept meter read a reply along a vector (the lesson's steer step quotes it)."""
        if message.found is not None:
            self.session.measured.meter = (message.name, message.found)
            self.lesson.strip.measured_changed()

    def on_steer_panel_changed(self, message: SteerPanel.Changed) -> None:
        """The session's steering changed (the lesson's steer step names it)."""
        self.lesson.strip.measured_changed()

    def compared(self, result: CompareResult | None) -> None:
        """F10 closed on a comparison (the app hands it here; None: none shown): the lesson's
        fit step quotes it."""
        if result is None:
            return
        self.session.measured.compare = result
        if self.is_mounted:  # (not laid out: `--vs` opened the versus screen instead)
            self.lesson.strip.measured_changed()

    @on(TokenStrip.Selected, "#reply-tokens")
    def on_reply_token_selected(self, message: TokenStrip.Selected) -> None:
        """A token of the reply selected in the Tokens tab: its candidates in the Next token
        tab, against the settings it was sampled with."""
        reply, index = self.pane.reply or self.pane.last_reply, message.index
        if self.view.token_panel.show_prompt or reply is None:
            return
        if 0 <= index < len(reply.tokens):
            tok, probs = reply.tokens[index], self.view.probs
            probs.step = index
            probs.settings = reply.settings_at(index, self.session.settings)
            probs.chosen = tok.id
            probs.candidates = tok.candidates

    # ---- dialogs --------------------------------------------------------------------------

    def action_system_prompt(self) -> None:
        def done(text: str | None) -> None:
            if text is not None:
                self.session.set_system_prompt(text)
                self.pane.set_status("system prompt set" if text else "system prompt cleared")

        self.app.push_screen(SystemPromptScreen(self.session.system_prompt, self.config), done)

    def action_pick_grammar(self) -> None:
        def done(choice: Grammar | str | None) -> None:
            if choice is not None:
                self.session.grammar = None if choice == CLEAR else choice  # type: ignore[assignment]
                self.pane.set_status(
                    "replies are free again" if choice == CLEAR else "from the next reply"
                )

        self.app.push_screen(GrammarScreen(self.session.grammar), done)

    def action_conversations(self) -> None:
        if self.pane.reply is not None:
            self.notify("Stop the reply first (Esc).")
            return
        store = self.session.history.store
        if store is None:
            self.notify("History is not available in this session.", severity="warning")
            return

        async def done(choice: Choice | None) -> None:
            if choice is None:
                return
            await self.pane.commands.new_chat()
            if choice.conversation_id is not None:
                await self.resume(choice.conversation_id)

        self.app.push_screen(ConversationsScreen(store), done)

    # ---- a saved conversation ------------------------------------------------------------

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
        views = [MessageView(m.role, m.text, stored_footer(m)) for m in kept]
        await self.pane.chat.add_items(views)
        self.pane.branches.label()
        self.pane.set_status(f"resumed: {conv.title} ({len(kept)} messages)")
        info, options = self.session.info, self.pane.slot.options
        loaded = info.path if info else None
        if conv.model_path and options and conv.model_path != loaded:
            if Path(conv.model_path).is_file():
                self.pane.slot.use(dataclasses.replace(options, model_path=conv.model_path))
                self.pane.start_model()
            else:
                self.notify(
                    f"this chat was made with {conv.model_path}, which is gone; "
                    "continuing with the loaded model",
                    severity="warning",
                )

    # ---- the tokenizer box ----------------------------------------------------------------

    @on(Input.Changed, "#tokenizer-input")
    def on_tokenizer_input(self, message: Input.Changed) -> None:
        self.app.run_worker(
            lambda: self._tokenize_typed(message.value),
            thread=True, exclusive=True, group="tokenize", exit_on_error=False,
        )  # fmt: skip

    def _tokenize_typed(self, text: str) -> None:
        """In a worker thread: the typed text's tokens, shown in the Tokens tab."""
        engine = self.slot.engine
        if engine is None or not text:
            self.app.call_from_thread(self.view.token_panel.show_typed, [])
            return
        try:
            pieces = engine.tokenize(text, special=True)
        except EngineError as exc:
            self.app.call_from_thread(self.pane.set_status, f"error: {exc}", True)
            return
        self.app.call_from_thread(self.view.token_panel.show_typed, pieces)
