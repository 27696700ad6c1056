"""Two model files side by side: one prompt, two conversation panes replying at once."""

from __future__ import annotations

import dataclasses

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.config import Config
from chatapp.cpus import usable_cpus
from chatapp.engine.protocol import EngineError, Finished, Token
from chatapp.sampling import SamplerSettings
from chatapp.ui.conversation.pane import ConversationPane
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.literal import literal
from chatapp.ui.prompt_input import PromptInput
from chatapp.ui.streaming import ReplyStream
from chatapp.ui.widgets.live_panel import LivePanel
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel
from chatapp.ui.widgets.stats import StatsPanel
from chatapp.ui.widgets.tokens import TokenPanel

SIDES = ("a", "b")
GREEDY = SamplerSettings(temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0)


def parting_step(a: list[Token], b: list[Token]) -> int | None:
    """The first step where the two files' top-1 choices differ (None: they agree so far).
    Compared on the candidates, so a sampled reply parts where the files do, not the dice."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        top_x = x.candidates[0].id if x.candidates else x.id
        top_y = y.candidates[0].id if y.candidates else y.id
        if top_x != top_y:
            return i
    return None


class Column(Vertical):
    """One file's side: its name above its conversation pane (whose status line is the side's
    speed line). It keeps the tokens of the pane's latest reply, as the pane reports them."""

    def __init__(self, side: str, title: str, pane: ConversationPane) -> None:
        super().__init__(id=f"col-{side}")
        self.side = side
        self.title = title
        self.pane = pane
        self.tokens: list[Token] = []  # the latest reply's
        self.finished: Finished | None = None  # how it ended (None: streaming, or it failed)
        self.error = ""  # why it failed

    def compose(self) -> ComposeResult:
        yield Static(literal(self.title), classes="title")
        yield self.pane

    def begin(self) -> None:
        self.tokens, self.finished, self.error = [], None, ""

    def on_reply_stream_tokens_arrived(self, message: ReplyStream.TokensArrived) -> None:
        self.tokens.extend(message.tokens)  # (the pane has shown them; the screen redraws next)

    def on_reply_stream_ended(self, message: ReplyStream.Ended) -> None:
        self.finished = message.event

    def on_reply_stream_errored(self, message: ReplyStream.Errored) -> None:
        self.error = message.message

    def mark(self, parted: int | None, cursor: int | None) -> None:
        """The finished reply's tokens from the parting step on marked, the step cursor reversed
        (shown as the tokens' text; as Markdown again where nothing is marked)."""
        items = self.pane.chat.items()
        if self.finished is None or not items or items[-1].role != "assistant":
            return
        if parted is None and cursor is None:
            items[-1].show_marked(None)
            return
        pieces = [(t.text, parted is not None and i >= parted) for i, t in enumerate(self.tokens)]
        items[-1].show_marked(pieces, cursor)


class VersusScreen(Screen):
    """`chatapp chat A.gguf --vs B.gguf`: each prompt goes to both files' conversation panes
    (one EngineSlot each), whose replies stream side by side; tokens from the first step where
    the files' top choices differ are marked; alt+left/right walk the steps and the panels show
    both files' candidates there. Greedy by default, so differences come from the files; sampler
    changes go to both. The history keeps both replies (B's as a branch beside A's)."""

    DEFAULT_CSS = """
    VersusScreen #cols { height: 1fr; }
    VersusScreen Column { width: 1fr; border-left: thick $primary; padding: 0 0 0 1; }
    VersusScreen Column > .title { height: 1; color: $primary; text-style: bold; }
    VersusScreen Column > .title, VersusScreen #status-line {
        text-wrap: nowrap; text-overflow: ellipsis; }
    VersusScreen Column PromptInput { display: none; }
    VersusScreen #vs-side { width: 53; padding: 0 0 0 1; }
    VersusScreen #vs-side .label { height: 1; color: $text-muted; }
    VersusScreen #vs-side ProbPanel { height: 9; }
    VersusScreen #vs-side .side { height: auto; }
    VersusScreen #vs-side TokenPanel, VersusScreen #vs-side StatsPanel { display: none; }
    VersusScreen #vs-status { height: 1; color: $text-muted; padding: 0 1; }
    VersusScreen MessageView > .messageview--draft {
        color: $foreground; background: $warning 30%; text-style: none; }
    """
    BINDINGS = [
        Binding("escape", "stop", "Stop both", id="vs.stop"),
        Binding("alt+left", "step(-1)", "Earlier step", id="vs.step_back", priority=True),
        Binding("alt+right", "step(1)", "Later step", id="vs.step_on", priority=True),
    ]

    def __init__(
        self,
        slots: tuple[EngineSlot, EngineSlot],
        labels: tuple[str, str],
        *,
        config: Config,
        history: ChatHistory,
        settings: SamplerSettings | None = None,
    ) -> None:
        super().__init__()
        self.config = dataclasses.replace(config, draft="")  # the files as they are: no drafts
        self.settings = settings or GREEDY
        self.slots = dict(zip(SIDES, slots, strict=True))
        for slot in slots:
            slot.listener = self  # their loads report here
        self.cursor: int | None = None  # the step walked to (None: the latest)
        self.settled = True  # whether this prompt's two replies have been settled (see _settle)
        self.holders: dict[str, Vertical] = {}  # each side's panels: label, candidates...
        sessions = {  # (b's replies are saved through a's, beside them)
            "a": ChatSession(history, self.settings, config.system_prompt),
            "b": ChatSession(None, self.settings, config.system_prompt),
        }
        self.columns = {
            side: Column(side, f"{side.upper()}: {label}", self._pane(side, sessions[side]))
            for side, label in zip(SIDES, labels, strict=True)
        }

    def _pane(self, side: str, session: ChatSession) -> ConversationPane:
        holder = Vertical(
            Static(f"{side.upper()}'s candidates", classes="label", id=f"label-{side}"),
            ProbPanel(id="probs"),
            TokenPanel(id="tokens"),
            StatsPanel(id="stats"),
            id=f"side-{side}",
            classes="side",
        )
        pane = ConversationPane(
            session,
            self.slots[side],
            self.config,
            id=f"pane-{side}",
            reply_group=f"generate-{side}",
        )
        self.holders[side] = holder
        return pane

    def compose(self) -> ComposeResult:
        with Horizontal(id="cols"):
            yield from self.columns.values()
            with Vertical(id="vs-side"):
                yield from self.holders.values()
                yield SamplerPanel(self.settings, presets=self.config.all_presets(), id="sampler")
        yield Static("loading both models…", id="vs-status")
        prompt = PromptInput(id="vs-prompt")
        prompt.placeholder = "One prompt for both files (Enter sends)"
        yield prompt
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#vs-prompt").focus()
        for column in self.columns.values():
            column.pane.start_model()

    def on_unmount(self) -> None:
        for slot in self.slots.values():
            slot.close()

    @property
    def sampler(self) -> SamplerPanel:
        return self.query_one("#sampler", SamplerPanel)

    @property
    def busy(self) -> bool:
        """Whether either reply is still streaming."""
        return any(column.pane.busy for column in self.columns.values())

    def status(self, text: str) -> None:
        self.query_one("#vs-status", Static).update(literal(text))

    def _side_of(self, slot: EngineSlot) -> str:
        return next(side for side, mine in self.slots.items() if mine is slot)

    def on_live_panel_joined(self, message: LivePanel.Joined) -> None:
        """A side's live panel: that side's conversation feeds it."""
        message.stop()
        for side, holder in self.holders.items():
            if holder in message.panel.ancestors:
                self.columns[side].pane.panels.join(message.panel)

    # ---- the two models (their slots report here) -----------------------------------------

    def on_engine_slot_ready(self, message: EngineSlot.Ready) -> None:
        message.stop()  # (the app's own slot is not this one)
        info = message.slot.ready(message)
        self.columns[self._side_of(message.slot)].pane.model_ready(info)
        if all(slot.engine is not None for slot in self.slots.values()):
            self.status("both models ready: type a prompt (alt+left/right: steps, Esc: stop)")

    def on_engine_slot_failed(self, message: EngineSlot.Failed) -> None:
        message.stop()
        message.slot.failed(message)
        self.columns[self._side_of(message.slot)].pane.model_failed(message.message)
        line = f"{self._side_of(message.slot).upper()}: {message.message}"
        self.status(f"error: {line}")
        self.notify(line, severity="error", timeout=10)

    def shared_cpu(self, side: str) -> str:
        """A note for the speed line when both workers run on the CPU at once: they share it
        (the other file has the other cores), so each decodes slower than it would alone ("" when
        one is on a GPU)."""
        infos = [c.pane.session.info for c in self.columns.values()]
        on_cpu = [i for i in infos if i is not None and i.n_gpu_layers < i.n_layers]
        mine = self.columns[side].pane.session.info
        if len(on_cpu) < 2 or mine is None:
            return ""
        return f" · {mine.n_threads} of {usable_cpus()} cores, shared"

    # ---- one prompt, two replies ------------------------------------------------------------

    def _not_ready(self) -> str:
        """Why a prompt cannot go now ("" when it can; a crashed worker is started again)."""
        for side, slot in self.slots.items():
            if slot.loading:
                return "the models are still loading"
            if slot.engine is None and slot.load_error:
                return f"{side.upper()} did not load: {slot.load_error}"
        return ""

    async def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        text = message.text.strip()
        if not text or self.busy:
            return
        problem = self._not_ready()
        if problem:
            self.status(problem)
            return
        self.query_one("#vs-prompt", PromptInput).clear()
        self.cursor, self.settled = None, False
        for column in self.columns.values():
            column.begin()
            await column.pane.send(text)
        note = " · the two workers share the CPU" if self.shared_cpu("a") else ""
        self.status("both replying… (Esc stops both)" + note)

    def on_reply_stream_tokens_arrived(self, message: ReplyStream.TokensArrived) -> None:
        self.redraw()

    def on_reply_stream_ended(self, message: ReplyStream.Ended) -> None:
        for side, column in self.columns.items():
            ev = column.finished
            if ev is not None and not column.pane.busy:
                # (the reply's footer has its speed)
                column.pane.set_status(f"done: {ev.reason}{self.shared_cpu(side)}")
        self._settle()
        self.redraw()

    def on_reply_stream_errored(self, message: ReplyStream.Errored) -> None:
        self._settle()

    def _settle(self) -> None:
        """Once both replies are over: where the files part, or what went wrong. Once per
        prompt: both panes' Ended messages can reach the screen after both columns have
        finished, and B's reply must be kept beside A's only once."""
        if self.settled or any(c.finished is None and not c.error for c in self.columns.values()):
            return  # (done already, or one is still replying, or waits for its model)
        self.settled = True
        errors = [f"{side.upper()}: {c.error}" for side, c in self.columns.items() if c.error]
        if errors:
            self.status(" · ".join(errors))
            return
        self._keep_b_beside_a()
        parted = parting_step(self.columns["a"].tokens, self.columns["b"].tokens)
        self.status(
            "both done: the files agree on every step"
            if parted is None
            else f"both done: the files' top choices part at step {parted}"
        )

    def _keep_b_beside_a(self) -> None:
        """The history keeps B's reply as a branch beside A's (with B's model noted); the view
        does not label it (alt+left/right walk the steps here)."""
        a, b = self.columns["a"], self.columns["b"]
        last = a.pane.session.tree.last
        if a.finished is None or b.finished is None or last.role != "assistant":
            return
        a.pane.session.keep_beside(last, b.finished, b.tokens, model=b.pane.session.info)
        for item in a.pane.chat.items():
            item.set_branch("")

    def redraw(self) -> None:
        """Both replies' marks, and both panels at the step walked to (the panes show the
        latest step themselves)."""
        a, b = self.columns["a"], self.columns["b"]
        parted = parting_step(a.tokens, b.tokens)
        step = self.cursor
        for side, column in self.columns.items():
            column.mark(parted, step)
            if step is not None and step < len(column.tokens):
                panel = self.holders[side].query_one(ProbPanel)
                token = column.tokens[step]
                panel.settings = column.pane.session.settings
                panel.step, panel.chosen = step, token.id
                panel.candidates = tuple(token.candidates)
        where = "" if parted is None else f" · the files part at step {parted}"
        shown = "latest" if step is None else f"step {step}"
        self.query_one("#label-a", Static).update(f"A's candidates ({shown}){where}")
        self.query_one("#label-b", Static).update(f"B's candidates ({shown})")

    # ---- keys and the sampler ---------------------------------------------------------------

    def action_stop(self) -> None:
        for column in self.columns.values():
            column.pane.stop()

    def action_step(self, delta: int) -> None:
        n = max(len(c.tokens) for c in self.columns.values())
        if not n:
            return
        current = self.cursor if self.cursor is not None else n
        self.cursor = max(0, min(n - 1, current + delta))
        self.redraw()

    def on_sampler_panel_settings_changed(self, message: SamplerPanel.SettingsChanged) -> None:
        self.settings = message.settings
        try:
            live = [c.pane.session.change_settings(message.settings) for c in self.columns.values()]
        except EngineError as exc:
            self.sampler.set_status(str(exc))
            return
        when = "from the next token of both replies" if any(live) else "from the next prompt"
        self.status(f"sampler changed for both files, {when}")
