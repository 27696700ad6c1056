"""The conversation pane: the chat, its status line and message box, the ChatSession behind them
and the one live reply (send, stream, stop, regenerate, edit, continue, rewind, branches)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from chatapp.chat.attachments import Attachment
from chatapp.chat.session import ChatSession
from chatapp.config import Config, draft_source
from chatapp.engine.protocol import ModelInfo, Token
from chatapp.ui.conversation.attach_box import AttachBox
from chatapp.ui.conversation.branch_view import BranchView
from chatapp.ui.conversation.commands import Commands
from chatapp.ui.conversation.copy_actions import Clipboard
from chatapp.ui.conversation.panel_feed import PanelFeed
from chatapp.ui.conversation.reply import Reply, footer_for
from chatapp.ui.conversation.reply_report import ReplyReport, limits_of
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.literal import literal
from chatapp.ui.pacing import FramePacer, settle_gc
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.streaming import SMOOTH, ReplyStream
from chatapp.ui.widgets.chat import ChatView, MessageView
from chatapp.ui.widgets.live_panel import LoadedModel

STOP_GRACE_S = 3.0  # after Esc, a worker that has not stopped by then is killed


class ConversationPane(Vertical):
    """One conversation: it owns the ChatSession and the live reply, maps the reply's events
    (posted here by the generation thread, ui/streaming.py) onto the chat and the live panels
    that joined it (`panels`), and runs the chat keys' commands (`commands`). The engine comes
    from `slot`; what is loaded there is `model`, which the panels watch."""

    model: reactive[LoadedModel | None] = reactive(None, always_update=True, init=False)
    """The loaded model's facts and capabilities, and whether it is loading (None: not yet)."""

    def __init__(
        self,
        session: ChatSession,
        slot: EngineSlot,
        config: Config,
        *,
        id: str | None = None,
        reply_group: str = "generate",  # its replies' worker group (a new reply replaces its own)
    ) -> None:
        super().__init__(id=id)
        self.session = session
        self.slot = slot
        self.config = config
        self.reply_group = reply_group
        session.enable_thinking = config.think
        session.speculation = draft_source(config.draft)[0]
        self.report = ReplyReport()  # the Speed panel's note on each finished reply
        self.reply: Reply | None = None
        self.last_reply: Reply | None = None
        self._reply_ids = 0
        self._reply_pending = False  # a user turn waits for the model to (re)load
        self.first_paint_s: list[float] = []  # submit -> first token painted, per reply
        self.paint_log: list[tuple[float, int]] = []  # (UI time, tokens) per batch shown
        self.pacer = FramePacer(SMOOTH)  # how often a streaming reply is drawn, paced here
        self.attached = AttachBox(self)  # files for the next message (`/file PATH`)
        self.clipboard = Clipboard(self)
        self.panels = PanelFeed(self, self.pacer)  # the live panels laid out for it (they join)
        self.commands = Commands(self)  # what the chat's keys do here

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat")
        yield Static("", id="status-line")
        yield PromptInput(id="prompt")

    # ---- the parts it draws on -------------------------------------------------------------

    @property
    def chat(self) -> ChatView:
        return self.query_one("#chat", ChatView)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    @cached_property
    def branches(self) -> BranchView:
        """The messages' branch labels, and the chat pane when the branch is switched."""
        return BranchView(self.session, self.chat)

    @property
    def closing(self) -> bool:
        """The app is closing: it removes its widgets (the side panels' parts too, in no set
        order), so a reply's handler resumed after an await draws nothing more (the slot ends
        the worker)."""
        return not self.app.is_running

    @property
    def busy(self) -> bool:  # a reply is in progress (then the model stays as it is)
        return self.reply is not None

    def set_status(self, text: str, error: bool = False) -> None:
        line = self.query_one("#status-line", Static)
        grammar = self.session.grammar  # what applies to every reply stays in sight
        tag = f"⊘ {grammar.source}" if grammar is not None else ""
        line.update(literal(f"{tag} · {text}" if tag and text else tag or text), layout=False)
        line.set_class(error, "error")

    async def command(self, name: str, *args: object) -> None:
        """Run the chat key's command `name` (a method of Commands, with `args`)."""
        result = getattr(self.commands, name)(*args)
        if inspect.isawaitable(result):
            await result

    # ---- the model ------------------------------------------------------------------------

    def start_model(self) -> None:
        if self.slot.start():
            self.set_status("loading the model…")
            self.model = (self.model or LoadedModel()).now("loading")

    def model_ready(self, info: ModelInfo) -> None:
        engine = self.slot.engine
        if engine is None:  # (gone again before its Ready message was handled)
            return
        self.session.attach(engine, info)
        self.model = LoadedModel("ready", info, engine.capabilities)
        self.set_status(f"ready: {Path(info.path).name} loaded in {info.load_s:.2f} s")
        self.pacer.use(self.slot.cadence)
        self.panels.sampler.show_draft(self.session.speculation)
        if self._reply_pending:
            self._reply_pending = False
            self.app.run_worker(self.generate(), exclusive=False)

    def model_failed(self, message: str) -> None:
        self.session.detach()
        self.set_status(f"error: {message}", error=True)
        self._reply_pending = False
        self.model = (self.model or LoadedModel()).now("no model")

    def tuned(self, info: ModelInfo) -> None:
        """The same model, run with other settings: the tune on first use's, or the exact
        batches a reply with drafts turned on."""
        self.session.info = info
        if self.model is not None:
            self.model = replace(self.model, state="tuned", info=info)

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
        self.prompt.clear()
        await self.send(text, self.attached.sent())

    async def send(self, text: str, files: Sequence[Attachment] = ()) -> None:
        """Add a user turn (with its attached files) and generate the reply to it."""
        self.session.add_user(text, files)
        await self.chat.add("user", self.session.conversation[-1].content)
        await self.generate()

    async def generate(
        self, prefix: list[Token] | None = None, item: MessageView | None = None
    ) -> None:
        if not self.session.ready:  # the turn stays; its reply starts once the model is loaded
            self._reply_pending = True  # (a dead worker is replaced first)
            self.start_model()
            self.set_status("the model is loading; your message will be answered when it is ready")
            return
        self._reply_ids += 1
        if item is None:
            item = await self.chat.add("assistant")
        await item.start_stream()
        prepared = self.session.prepare(prefix or [])
        live = prepared.reply
        split = live.split
        reply = Reply(self._reply_ids, item, live, len(split.thinking), len(split.answer))
        self.reply = reply
        self._blink(False)  # a blinking cursor is two frames a second that the model pays for
        self.paint_log = []
        self.chat.dim_left_out(item, len(self.session.conversation), prepared.dropped)
        reply.note = prepared.note  # said once: the status line while it streams and when done
        self.panels.start(live)
        self.pacer.start()
        self.set_status("generating… (Esc stops)" + (f" · {reply.note}" if reply.note else ""))
        pacer = self.pacer
        stream = ReplyStream(
            self.slot.engine, prepared.request, reply.id, self.post_message, lambda: pacer.text_s
        )
        self.app.run_worker(
            stream.run, thread=True, exclusive=True, group=self.reply_group, exit_on_error=False
        )

    def stop(self) -> bool:
        """Stop the reply streaming (killed after STOP_GRACE_S); False when none streams."""
        if self.reply is None:
            return False
        if self.slot.engine is None:
            return True
        self.session.cancel()
        self.set_status("stopping…")
        reply_id = self.reply.id
        self.set_timer(STOP_GRACE_S, lambda: self._kill_if_stuck(reply_id))
        return True

    def _kill_if_stuck(self, reply_id: int) -> None:
        if self.reply is not None and self.reply.id == reply_id:
            self.session.kill()  # the generation thread then reports the worker as crashed

    # ---- the reply's events (posted by the generation thread) -----------------------------

    def _live(self, reply_id: int) -> Reply | None:
        """The reply streaming, if a message from the generation thread is about it."""
        return self.reply if self.reply is not None and self.reply.id == reply_id else None

    def on_reply_stream_prompt_shown(self, message: ReplyStream.PromptShown) -> None:
        if self._live(message.reply_id) is not None:
            self.session.prompt_evaluated(message.event)  # (the panels show it with the reply)

    async def on_reply_stream_tokens_arrived(self, message: ReplyStream.TokensArrived) -> None:
        reply = self._live(message.reply_id)
        if reply is None:
            return
        first = not reply.live.started
        shown = self.session.took(message.tokens)
        if not shown:  # (tokens only of the other replies decoded together)
            return
        self.pacer.framed()
        self.paint_log.append((time.perf_counter(), len(shown)))
        await reply.show_text()
        if self.closing:
            return
        if first:
            self.call_after_refresh(self._record_first_paint, reply)
        self.panels.frame(first)

    def on_reply_stream_prefill_progressed(self, message: ReplyStream.PrefillProgressed) -> None:
        if self._live(message.reply_id) is None:
            return
        done, total, elapsed = message.done, message.total, message.elapsed_s
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", about {(total - done) / rate:.0f} s left" if rate > 0 else ""
        self.set_status(
            f"reading the prompt: {done:,}/{total:,} tokens ({rate:,.0f} t/s{eta}; Esc stops)"
        )

    def _record_first_paint(self, reply: Reply) -> None:
        live = reply.live
        live.first_paint_s = time.perf_counter() - live.submitted
        self.first_paint_s.append(live.first_paint_s)

    def on_reply_stream_settings_took_effect(self, message: ReplyStream.SettingsTookEffect) -> None:
        index = message.event.index
        self.panels.sampler.set_status(f"applied from token {index} of the reply")
        if self._live(message.reply_id) is not None:
            self.session.settings_applied(index, message.event.settings)

    def on_reply_stream_steering_took_effect(self, message: ReplyStream.SteeringTookEffect) -> None:
        """Steering changed mid-reply (the Steer tab): kept with the reply, marked in Tokens."""
        if self._live(message.reply_id) is not None:
            self.session.steering_applied(message.event)
            self.panels.tokens.show_steering()

    async def on_reply_stream_ended(self, message: ReplyStream.Ended) -> None:
        reply = self._live(message.reply_id)
        if reply is None:
            return
        ev = message.event
        info = self.session.info
        if ev.stats.exact_batches and info is not None and not info.exact_batches:
            info = replace(info, exact_batches=True, flash_attn=True)
            self.tuned(info)
        label = reply.thinking_label()
        split = self.session.finished(ev)
        if split.thinking or split.closed:
            if not split.closed:
                label += " · the reply ended while thinking"
            await reply.item.finish(
                split.answer, footer_for(ev, reply, info), split.thinking, label, fold=split.closed
            )
        else:
            await reply.item.finish(ev.text, footer_for(ev, reply, info))
        if self.closing:
            return
        self.branches.finished(reply.item.footer)
        model = info.path if info else ""
        reply.live.limits = limits_of(self.model, ev)
        self.panels.end(self.report.note(ev, model, reply.live.first_paint_s, reply.live.limits))
        detail = f" ({ev.detail})" if ev.detail else ""
        self.set_status(f"done: {ev.reason}{detail}" + (f" · {reply.note}" if reply.note else ""))
        self._end_reply()

    async def on_reply_stream_errored(self, message: ReplyStream.Errored) -> None:
        reply = self._live(message.reply_id)
        if reply is None:
            return
        text = self.session.failed(message.message)  # what it wrote so far stays
        self.panels.end()
        note = f"⚠ {message.message}"
        if message.log_tail:
            note += "\n\nlast log lines:\n" + message.log_tail
        await reply.item.finish(text, note)
        if self.closing:
            return
        reply.item.add_class("error")
        self.branches.label()
        self.set_status(f"error: {message.message}", error=True)
        if message.crashed:
            self.slot.lost()
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
        self.call_after_refresh(settle_gc)

    def _blink(self, on: bool) -> None:
        if self.slot.cadence.budget is not None:
            self.prompt.cursor_blink = on
