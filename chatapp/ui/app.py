"""The chat app: layout, bindings and the flow from a submitted prompt to a finished reply."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.config import Config
from chatapp.engine.local.machine import physical_cores
from chatapp.engine.protocol import (
    ChatMessage,
    Engine,
    EngineCrashed,
    EngineError,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    PromptEvaluated,
    Token,
)
from chatapp.errors import ChatappError
from chatapp.sampling import SamplerSettings
from chatapp.ui import themes
from chatapp.ui.actions import ChatActions
from chatapp.ui.messages import (
    EngineFailed,
    EngineReady,
    NoticeShown,
    PromptShown,
    ReplyFailed,
    ReplyFinished,
    SettingsTookEffect,
    TokensArrived,
)
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.reply import Reply, footer_for
from chatapp.ui.streaming import LIGHT, SMOOTH, cadence_for, stream_reply
from chatapp.ui.widgets.chat import ChatView, MessageView
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.stats import SPARK_POINTS, LiveStats, StatsPanel
from chatapp.ui.widgets.tokens import ShownToken, TokenPanel, TokenStrip

STOP_GRACE_S = 3.0  # after Esc, a worker that has not stopped by then is killed


class ChatApp(ChatActions, App):
    """Chat with a local model and watch tokens, speed and probabilities live."""

    CSS_PATH = "app.tcss"
    TITLE = "chatapp"
    BINDINGS = [
        Binding("escape", "stop", "Stop", id="chat.stop"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="chat.regenerate", priority=True),
        Binding("ctrl+e", "edit_last", "Edit last", id="chat.edit_last", priority=True),
        Binding("ctrl+o", "continue_reply", "Continue", id="chat.continue", priority=True),
        Binding("ctrl+w", "rewind", "Rewind here", id="chat.rewind", priority=True),
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new", priority=True),
        Binding("f1", "help", "Help", id="app.help", priority=True),
        Binding("f2", "system_prompt", "System", id="chat.system_prompt", priority=True),
        Binding("f3", "toggle_side", "Panels", id="view.toggle_side", priority=True),
        Binding(
            "f4", "toggle_prompt_tokens", "Prompt tokens", id="view.prompt_tokens", priority=True
        ),
        Binding("f5", "toggle_ids", "Token ids", id="view.token_ids", priority=True),
        Binding("f6", "focus_sampler", "Sampler", id="view.focus_sampler", priority=True),
        Binding("ctrl+t", "next_theme", "Theme", id="view.next_theme", priority=True),
        Binding("f7", "conversations", "History", id="chat.history", priority=True),
        Binding("f8", "pick_model", "Models", id="models.pick", priority=True),
        Binding("f9", "model_card", "Model card", id="models.card", priority=True),
        Binding("f10", "compare_models", "Compare", id="models.compare", priority=True),
        Binding(
            "ctrl+k",
            "restart_engine",
            "Restart model",
            show=False,
            id="engine.restart",
            priority=True,
        ),
    ]

    def __init__(
        self,
        engine_factory: Callable[[], object],
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
    ) -> None:
        super().__init__()
        self.config = config or Config()  # its presets, model_dirs and [keys] are used here
        history = history or ChatHistory(None, self._warn)
        self.session = ChatSession(history, settings, system_prompt)
        self.options = options
        self.startup_notes = list(startup_notes)
        self.engine_factory = engine_factory
        self.engine: Engine | None = None  # set when loaded; the session gets it when ready
        self.model_label = model_label
        self.reply: Reply | None = None
        self.last_reply: Reply | None = None
        self._reply_ids = 0
        self._reply_pending = False  # a user turn waits for the model to (re)load
        self._loading = False
        self.load_error: str | None = None  # why the last load failed (None: it did not)
        self._remember_theme = remember_theme
        self._wanted_theme = theme_name
        self.theme_problems: list[str] = []
        self.first_paint_s: list[float] = []  # submit -> first token painted, per reply
        self._prompt_len = 0
        self.paint_log: list[tuple[float, int]] = []  # (UI time, tokens) per batch shown
        self._unshown: list[Token] = []  # tokens of the reply not yet in the side panels
        self._panels_at = 0.0  # when the side panels were last redrawn
        self._panels_timer = None
        self.cadence = SMOOTH  # how often a streaming reply is drawn (set per model)
        self._prompt_event: PromptEvaluated | None = None  # not yet in the panels

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
    def info(self) -> ModelInfo | None:
        return self.session.info

    @property
    def ignore_eos(self) -> bool:
        return self.session.ignore_eos

    @ignore_eos.setter
    def ignore_eos(self, value: bool) -> None:
        self.session.ignore_eos = value

    # ---- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield ChatView(id="chat")
                yield Static("", id="status-line")
                yield PromptInput(id="prompt")
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
                sampler = SamplerPanel(
                    self.settings, presets=self.config.all_presets(), id="sampler"
                )
                sampler.border_title = "Sampler (live)"
                yield sampler
        yield Footer()

    def on_mount(self) -> None:
        self.set_keymap(self.config.keymap)  # [keys]: binding id -> key
        self._register_themes()
        self.sub_title = self.model_label
        self.query_one("#probs", ProbPanel).settings = self.settings
        self.query_one("#prompt", PromptInput).focus()
        self.call_after_refresh(_settle_gc)
        for note in self.startup_notes:
            self.notify(note, title="Config", severity="warning", timeout=10)
        self.start_engine()

    def _warn(self, message: str) -> None:
        self.notify(message, title="History", severity="warning", timeout=10)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # App keys are priority bindings (they win over the text box's own ctrl and F keys),
        # but not while a dialog is open.
        if isinstance(self.screen, ModalScreen) and action in _APP_ACTIONS:
            return False
        return True

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Panel colours for themes that do not set them (Textual's built-in ones)."""
        return dict(themes.PANEL_DEFAULTS)

    def _register_themes(self) -> None:
        found, self.theme_problems = themes.discover()
        for theme in found:
            self.register_theme(theme)
        wanted = self._wanted_theme or themes.DEFAULT_THEME
        self.theme = wanted if wanted in self.available_themes else themes.DEFAULT_THEME
        for problem in self.theme_problems:
            self.notify(problem, title="Theme file skipped", severity="warning")

    def watch_theme(self, name: str) -> None:
        if self._remember_theme is not None and self.is_mounted:
            self._remember_theme(name)

    # ---- the engine -----------------------------------------------------------------------

    def start_engine(self) -> None:
        if self._loading:
            return
        self._loading = True
        self.set_status("loading the model…")
        self.stats_panel.stats = LiveStats(state="loading")
        self._load_engine()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _load_engine(self) -> None:
        try:
            if self.engine is not None:
                self.engine.close()
            engine = self.engine_factory()
            info = engine.start()  # GPU step-down and CPU fallbacks happen inside
            for note in engine.notes:
                self.post_message(NoticeShown(note))
        except EngineCrashed as exc:
            self.post_message(EngineFailed(str(exc), exc.log_tail, crashed=True))
            return
        except ChatappError as exc:  # EngineError, or a ModelFileError from the file check
            self.post_message(EngineFailed(str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - shown to the user, app keeps running
            self.post_message(EngineFailed(f"could not start the model: {exc}"))
            return
        self.engine = engine
        self.post_message(EngineReady(info))

    def on_engine_ready(self, message: EngineReady) -> None:
        self._loading = False
        self.session.attach(self.engine, message.info)
        self.cadence = cadence_for(message.info, physical_cores())
        self.stats_panel.info = message.info
        self.stats_panel.stats = LiveStats(state="ready", n_ctx=message.info.n_ctx)
        name = Path(message.info.path).name
        self.sub_title = f"{name} · ctx {message.info.n_ctx}"
        self.set_status(f"ready: {name} loaded in {message.info.load_s:.2f} s")
        if self._reply_pending:
            self._reply_pending = False
            self.run_worker(self._generate(), exclusive=False)

    def on_engine_failed(self, message: EngineFailed) -> None:
        self.load_error = message.message
        self._loading = False
        self._reply_pending = False
        self.engine = None
        self.session.detach()
        self.stats_panel.stats = self.stats_panel.stats.but(state="no model")
        self.set_status(f"error: {message.message}", error=True)
        self.notify(message.message, title="Model not loaded", severity="error", timeout=10)

    def action_restart_engine(self) -> None:
        if self.reply is None:
            self.start_engine()

    # ---- sending --------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    async def on_prompt_submitted(self, message: PromptInput.Submitted) -> None:
        text = message.text
        if not text.strip():
            return
        if self.reply is not None:
            self.notify("A reply is still streaming: press Esc to stop it first.")
            return
        self.query_one("#prompt", PromptInput).clear()
        await self.send(text)

    async def send(self, text: str) -> None:
        """Add a user turn and generate the reply to it."""
        self.session.add_user(text)
        await self.chat.add("user", text)
        await self._generate()

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
        self._cancel_panels_timer()  # (the last reply's finish flushed its panels)
        self._prompt_event = None
        self._unshown = []
        self._panels_at = 0.0
        prepared = self.session.prepare(reply.tokens)
        self._show_left_out(item, prepared.dropped)
        self.probs.step = None
        self.token_panel.reset_reply([_shown(t) for t in reply.tokens])
        self.stats_panel.speeds = ()
        self.stats_panel.stats = self.stats_panel.stats.but(
            state="generating", stop_reason="", tokens=len(reply.tokens), decode_tps=None
        )
        self.set_status("generating… (Esc stops)")
        self._stream(prepared.request, reply.id)

    def _show_left_out(self, reply_item: MessageView, dropped: int) -> None:
        """Dim the messages the prompt leaves out (the oldest); the history keeps them."""
        items = [it for it in self.chat.items() if it is not reply_item]
        offset = len(self.conversation) - len(items)
        for i, it in enumerate(items):
            it.set_class(dropped > 0 and i + offset < dropped, "left-out")
        if dropped:
            n_ctx = self.info.n_ctx if self.info else 0
            self.notify(
                f"{dropped} oldest messages are left out of the prompt to fit the "
                f"context ({n_ctx} tokens); they stay in the history.",
                timeout=6,
            )

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _stream(self, request: GenerateRequest, reply_id: int) -> None:
        stream_reply(self.engine, request, reply_id, self.post_message, self.cadence.text_s)

    # ---- events from the generation thread -----------------------------------------------

    def on_prompt_shown(self, message: PromptShown) -> None:
        # Shown with the panels, after the first token is on screen: a frame drawing the
        # prompt's tokens would otherwise delay that first paint.
        self._prompt_len = len(message.event.tokens)
        self._prompt_event = message.event
        if self.reply is None:
            self._refresh_panels()

    def _show_prompt(self, ev: PromptEvaluated) -> None:
        self.token_panel.set_prompt(
            [ShownToken(t.id, t.piece, special=t.special) for t in ev.tokens]
        )
        self.stats_panel.stats = self.stats_panel.stats.but(
            prefill_tps=(ev.n_new / ev.prefill_s) if ev.prefill_s > 0 else None,
            prompt_new=ev.n_new,
            prompt_reused=ev.n_reused,
        )

    async def on_tokens_arrived(self, message: TokensArrived) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        first = not reply.tokens or len(reply.tokens) == len(reply.prefix_ids)
        reply.add(message.tokens)
        self.paint_log.append((time.perf_counter(), len(message.tokens)))
        await reply.item.write("".join(t.text for t in message.tokens))
        self.session.took(message.tokens)
        if first and reply.first_paint_s is None:
            self.call_after_refresh(self._record_first_paint, reply)
        self._unshown.extend(message.tokens)
        wait = self._panels_at + self.cadence.panels_s - time.perf_counter()
        if first:
            self._panels_at = time.perf_counter()  # the next batches wait for the interval
            self.call_after_refresh(self._refresh_panels)  # the first token's frame stays small
        elif wait <= 0:
            self._refresh_panels()
        elif self._panels_timer is None:
            self._panels_timer = self.set_timer(wait, self._refresh_panels)

    def _cancel_panels_timer(self) -> None:
        if self._panels_timer is not None:
            self._panels_timer.stop()
            self._panels_timer = None

    def _refresh_panels(self) -> None:
        """Bring the side panels up to the reply's latest token."""
        self._cancel_panels_timer()
        reply = self.reply
        self._panels_at = time.perf_counter()
        if self._prompt_event is not None:
            self._show_prompt(self._prompt_event)
            self._prompt_event = None
        if reply is None or not self._unshown:
            return
        new, self._unshown = self._unshown, []
        self.token_panel.add_reply([_shown(t) for t in new])
        last = new[-1]
        if self.probs.step is None:
            self.probs.settings = self.settings
            self.probs.chosen = last.id
            self.probs.candidates = last.candidates
        self.stats_panel.speeds = tuple(reply.speeds[-SPARK_POINTS:])  # not the whole reply
        self.stats_panel.stats = self.stats_panel.stats.but(
            ttft_s=reply.ttft_s,
            decode_tps=reply.decode_tps,
            tokens=len(reply.tokens),
            n_past=self._prompt_len + len(reply.tokens),
            first_paint_s=reply.first_paint_s,
        )

    def _record_first_paint(self, reply: Reply) -> None:
        reply.first_paint_s = time.perf_counter() - reply.submitted
        self.first_paint_s.append(reply.first_paint_s)
        self.stats_panel.stats = self.stats_panel.stats.but(first_paint_s=reply.first_paint_s)

    def on_settings_took_effect(self, message: SettingsTookEffect) -> None:
        index = message.event.index
        self.sampler.set_status(f"applied from token {index} of the reply")
        if self.reply is not None:
            self.reply.settings_changes.append((index, message.event.settings))

    def on_notice_shown(self, message: NoticeShown) -> None:
        self.notify(message.message, title="Note", severity="warning")

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        self._refresh_panels()
        ev = message.event
        reply.finished = ev
        st = ev.stats
        await reply.item.finish(ev.text, footer_for(ev, reply, self.info))
        self.session.finished(ev)
        self.stats_panel.stats = self.stats_panel.stats.but(
            state="ready",
            stop_reason=str(ev.reason),
            ttft_s=st.ttft_s,
            decode_tps=st.decode_tps or reply.decode_tps,
            tokens=len(reply.tokens),
            n_past=st.n_past,
            n_ctx=st.n_ctx or self.stats_panel.stats.n_ctx,
        )
        self.set_status(f"done: {ev.reason}" + (f" ({ev.detail})" if ev.detail else ""))
        self._end_reply()

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        reply = self.reply
        if reply is None or message.reply_id != reply.id:
            return
        self._refresh_panels()
        text = self.session.failed(message.message)  # what it wrote so far stays
        note = f"⚠ {message.message}"
        if message.log_tail:
            note += "\n\nlast log lines:\n" + message.log_tail
        await reply.item.finish(text, note)
        reply.item.add_class("error")
        self.stats_panel.stats = self.stats_panel.stats.but(state="error", stop_reason="error")
        self.set_status(f"error: {message.message}", error=True)
        if message.crashed:
            self.engine = None
            self.session.detach()
            self.notify(
                "The model worker died. Press ctrl+k (or send again) to start a new one.",
                title="Model worker crashed",
                severity="error",
                timeout=10,
            )
        self._end_reply()

    def _end_reply(self) -> None:
        self.last_reply = self.reply
        self.reply = None
        self._blink(True)
        self.call_after_refresh(_settle_gc)

    def _blink(self, on: bool) -> None:
        if self.cadence is LIGHT:
            self.query_one("#prompt", PromptInput).cursor_blink = on

    # ---- actions ----------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.reply is None or self.engine is None:
            return
        self.session.cancel()
        self.set_status("stopping…")
        reply_id = self.reply.id
        self.set_timer(STOP_GRACE_S, lambda: self._kill_if_stuck(reply_id))

    def _kill_if_stuck(self, reply_id: int) -> None:
        if self.reply is not None and self.reply.id == reply_id:
            self.session.kill()  # the generation thread then reports the worker as crashed

    # ---- panels -----------------------------------------------------------------------------

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

    @on(Input.Changed, "#tokenizer-input")
    def on_tokenizer_input(self, message: Input.Changed) -> None:
        self._tokenize_typed(message.value)

    @work(thread=True, exclusive=True, group="tokenize", exit_on_error=False)
    def _tokenize_typed(self, text: str) -> None:
        if self.engine is None or not text:
            self.call_from_thread(self.token_panel.show_typed, [])
            return
        try:
            pieces = self.engine.tokenize(text, special=True)
        except EngineError as exc:
            self.call_from_thread(self.set_status, f"error: {exc}", True)
            return
        shown = [ShownToken(p.id, p.piece, special=p.special) for p in pieces]
        self.call_from_thread(self.token_panel.show_typed, shown)

    # ---- helpers ----------------------------------------------------------------------------

    @property
    def chat(self) -> ChatView:
        return self.query_one("#chat", ChatView)

    @property
    def probs(self) -> ProbPanel:
        return self.query_one("#probs", ProbPanel)

    @property
    def token_panel(self) -> TokenPanel:
        return self.query_one("#tokens", TokenPanel)

    @property
    def stats_panel(self) -> StatsPanel:
        return self.query_one("#stats", StatsPanel)

    @property
    def sampler(self) -> SamplerPanel:
        return self.query_one("#sampler", SamplerPanel)

    def set_status(self, text: str, error: bool = False) -> None:
        line = self.query_one("#status-line", Static)
        line.update(text, layout=False)  # one line, fixed height
        line.set_class(error, "error")

    def _binding_rows(self) -> list[tuple[str, str, str]]:
        rows = [
            ("enter", "Send the message", "prompt.submit"),
            ("alt+enter / ctrl+j", "New line in the message", "prompt.newline"),
        ]
        for b in self.BINDINGS:
            rows.append((b.key, b.description, b.id or ""))
        rows += [
            ("←/→ (Tokens tab)", "Move the token cursor", "tokens.left/right"),
            ("←/→ (slider)", "Change a sampler value; shift = ×10", "slider.less/more"),
            ("ctrl+p", "Command palette", "app.command_palette"),
            ("ctrl+q", "Quit", "app.quit"),
        ]
        return rows

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.BINDINGS:
            action = b.action
            yield SystemCommand(
                b.description, f"{b.description} ({b.key})", lambda a=action: self.run_action(a)
            )
        for name in self.sampler.presets:
            yield SystemCommand(
                f"Preset: {name}",
                f"Sampler preset {name}",
                lambda n=name: self.sampler.apply_preset(n),
            )

    async def on_unmount(self) -> None:
        if self.engine is not None:
            self.engine.close()


_APP_ACTIONS = {b.action for b in ChatApp.BINDINGS if b.key != "escape"}


def _settle_gc() -> None:
    """Collect now (between replies) and freeze what survives: the long-lived widgets then cost
    nothing in the collections that would otherwise pause the UI >100 ms while streaming."""
    gc.collect()
    gc.freeze()


def _shown(tok: Token) -> ShownToken:
    return ShownToken(tok.id, tok.piece, tok.logprob)


def run_chat_app(options: LoadOptions, server: str | None = None, **kwargs) -> None:
    """Open the TUI on a local model (or a server)."""
    from chatapp.ui.launch import build_app

    build_app(options, server=server, **kwargs).run()
