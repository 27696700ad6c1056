"""Two model files side by side: one prompt, two replies streaming at once, where they part."""

from __future__ import annotations

import os
from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, Static

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.config import Config, effective_theme
from chatapp.engine.protocol import Engine, Token
from chatapp.sampling import SamplerSettings
from chatapp.stats_text import decode_text, ttft_text
from chatapp.textsafe import printable
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.literal import LiteralApp, literal
from chatapp.ui.streaming import ReplyStream
from chatapp.ui.themes import PANEL_DEFAULTS
from chatapp.ui.themes import install as install_themes
from chatapp.ui.widgets.probs import ProbPanel
from chatapp.ui.widgets.sampler import SamplerPanel

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
    """One file's side: its name, the conversation as it saw it, and its speed line."""

    DEFAULT_CSS = """
    Column { width: 1fr; border-left: thick $primary; padding: 0 1; }
    Column > .title { height: 1; color: $primary; text-style: bold; }
    Column > VerticalScroll { height: 1fr; }
    Column > .speed { height: auto; max-height: 4; color: $text-muted; }
    Column .turn { margin: 0 0 1 0; }
    """
    COMPONENT_CLASSES = {"column--parted", "column--user"}
    DEFAULT_CSS += """
    Column > .column--parted { background: $warning 30%; }
    Column > .column--user { color: $accent; }
    """

    def __init__(self, side: str, title: str) -> None:
        super().__init__(id=f"col-{side}")
        self.side = side
        self.title = title
        self.tokens: list[Token] = []  # the reply being shown

    def compose(self) -> ComposeResult:
        yield Static(literal(self.title), classes="title")
        yield VerticalScroll(id=f"log-{self.side}")
        yield Static("", classes="speed", id=f"speed-{self.side}")

    async def add_user(self, text: str) -> None:
        style = self.get_component_rich_style("column--user")
        await self.query_one(VerticalScroll).mount(
            Static(literal(f"You: {text}", style=style), classes="turn")
        )
        self.tokens = []
        await self.query_one(VerticalScroll).mount(Static("", classes="turn reply"))

    def show(self, parted: int | None, cursor: int | None) -> None:
        """Draw the reply: tokens from the parting step on marked, the step cursor reversed."""
        replies = self.query(".reply")
        if not replies:
            return
        mark = self.get_component_rich_style("column--parted")
        text = Text()
        for i, tok in enumerate(self.tokens):
            style = mark if parted is not None and i >= parted else ""
            if i == cursor:
                style = "reverse"
            text.append(printable(tok.text), style)
        replies.last(Static).update(text)
        self.query_one(VerticalScroll).scroll_end(animate=False)

    def speed(self, line: str) -> None:
        self.query_one(f"#speed-{self.side}", Static).update(literal(line))


class VersusApp(LiteralApp, App):
    """`chatapp chat A.gguf --vs B.gguf`: each prompt goes to both files (two workers), the
    replies stream side by side; tokens from the first step where the files' top choices
    differ are marked; alt+left/right walk the steps and the panels show both files'
    candidates there. Greedy by default, so differences come from the files; sampler changes
    go to both. The history keeps both replies (B's as a branch beside A's)."""

    TITLE = "chatapp: side by side"
    CSS = """
    #cols { height: 1fr; }
    #side { width: 52; }
    #side > .label { height: 1; color: $text-muted; }
    #side > ProbPanel { height: 9; }
    #status { height: 1; color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "stop", "Stop both", id="vs.stop"),
        Binding("alt+left", "step(-1)", "Earlier step", id="vs.step_back", priority=True),
        Binding("alt+right", "step(1)", "Later step", id="vs.step_on", priority=True),
    ]

    def __init__(
        self,
        factories: tuple[Callable[[], Engine], Callable[[], Engine]],
        labels: tuple[str, str],
        *,
        settings: SamplerSettings | None = None,
        history: ChatHistory | None = None,
        config: Config | None = None,
        notes: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.config = config or Config()
        self.notes = list(notes or [])
        self.slots = {
            side: EngineSlot(self, factory, group=f"load-{side}")
            for side, factory in zip(SIDES, factories, strict=True)
        }
        self.labels = labels
        self.settings = settings or GREEDY
        self.sessions = {
            "a": ChatSession(history or ChatHistory(None, self._warn), self.settings),
            "b": ChatSession(None, self.settings),  # (its replies are saved through a's)
        }
        self.streaming: set[str] = set()
        self.finished: dict[str, object] = {}
        self.cursor: int | None = None

    def _warn(self, message: str) -> None:
        self.notify(message, severity="warning")

    def compose(self) -> ComposeResult:
        with Horizontal(id="cols"):
            yield Column("a", f"A: {self.labels[0]}")
            yield Column("b", f"B: {self.labels[1]}")
            with Vertical(id="side"):
                yield Static("A's candidates", classes="label", id="label-a")
                yield ProbPanel(id="probs-a")
                yield Static("B's candidates", classes="label", id="label-b")
                yield ProbPanel(id="probs-b")
                yield SamplerPanel(self.settings, id="sampler")
        yield Static("loading both models…", id="status")
        yield Input(placeholder="One prompt for both files (Enter)", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        self.set_keymap(self.config.keymap)  # [keys]: binding id -> key, as in the chat
        install_themes(self, effective_theme(self.config))
        for note in self.notes:  # config.toml's problems, as the chat shows them
            self.notify(note, severity="warning", timeout=10)
        for slot in self.slots.values():
            slot.start()
        self.query_one("#prompt", Input).focus()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(PANEL_DEFAULTS)

    def column(self, side: str) -> Column:
        return self.query_one(f"#col-{side}", Column)

    def status(self, text: str) -> None:
        self.query_one("#status", Static).update(literal(text))

    # ---- the two engines ------------------------------------------------------------------

    def _side_of(self, slot: EngineSlot) -> str:
        return next(side for side, mine in self.slots.items() if mine is slot)

    def both_loaded(self) -> bool:
        return all(slot.engine is not None for slot in self.slots.values())

    def on_engine_slot_ready(self, message: EngineSlot.Ready) -> None:
        info = message.slot.ready(message)
        self.sessions[self._side_of(message.slot)].attach(message.slot.engine, info)
        if self.both_loaded():
            self.status("both models ready: type a prompt (alt+left/right: steps, Esc: stop)")

    def on_engine_slot_failed(self, message: EngineSlot.Failed) -> None:
        message.slot.failed(message)
        line = f"{self._side_of(message.slot).upper()}: {message.message}"
        self.status(f"error: {line}")
        self.notify(line, severity="error", timeout=10)

    def shared_cpu(self, side: str) -> str:
        """A note for the speed line when both workers run on the CPU at once: they share it,
        so each decodes slower than it would alone ("" when one is on a GPU)."""
        infos = [s.info for s in self.sessions.values() if s.info is not None]
        on_cpu = [i for i in infos if i.n_gpu_layers < i.n_layers]
        if len(on_cpu) < 2:
            return ""
        mine = self.sessions[side].info
        return f" · {mine.n_threads} of {os.cpu_count() or 1} cores, shared with the other file"

    # ---- one prompt, two replies ------------------------------------------------------------

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or self.streaming:
            return
        if not self.both_loaded():
            self.status("the models are still loading")
            return
        event.input.value = ""
        self.finished = {}
        self.cursor = None
        for side in SIDES:
            await self.column(side).add_user(text)
            session = self.sessions[side]
            session.add_user(text)
            request = session.prepare().request
            self.streaming.add(side)
            self._stream(side, request)
        note = " · the two workers share the CPU" if self.shared_cpu("a") else ""
        self.status("both replying… (Esc stops both)" + note)

    @work(thread=True, exit_on_error=False, group="generate")
    def _stream(self, side: str, request) -> None:
        engine = self.slots[side].engine
        ReplyStream(engine, request, SIDES.index(side), self.post_message).run()

    def _side(self, reply_id: int) -> str:
        return SIDES[reply_id]

    def on_reply_stream_tokens_arrived(self, message: ReplyStream.TokensArrived) -> None:
        side = self._side(message.reply_id)
        self.sessions[side].took(message.tokens)
        self.column(side).tokens.extend(message.tokens)
        self.redraw()

    def redraw(self) -> None:
        a, b = self.column("a"), self.column("b")
        parted = parting_step(a.tokens, b.tokens)
        for col in (a, b):
            col.show(parted, self.cursor)
        step = self.cursor
        for side, col in (("a", a), ("b", b)):
            panel = self.query_one(f"#probs-{side}", ProbPanel)
            toks = col.tokens
            at = step if step is not None else len(toks) - 1
            if 0 <= at < len(toks):
                panel.settings = self.sessions[side].settings
                panel.step = at
                panel.chosen = toks[at].id
                panel.candidates = toks[at].candidates
        where = "" if parted is None else f" · the files part at step {parted}"
        shown = "latest" if step is None else f"step {step}"
        self.query_one("#label-a", Static).update(f"A's candidates ({shown}){where}")
        self.query_one("#label-b", Static).update(f"B's candidates ({shown})")

    def on_reply_stream_ended(self, message: ReplyStream.Ended) -> None:
        side = self._side(message.reply_id)
        ev = message.event
        self.sessions[side].finished(ev)
        self.finished[side] = ev
        self.streaming.discard(side)
        st = ev.stats
        shared = self.shared_cpu(side)
        self.column(side).speed(
            f"TTFT {ttft_text(st.ttft_s)} · decode {decode_text(st.decode_tps)} · "
            f"{st.completion_tokens} tokens · stop: {ev.reason}{shared}"
        )
        if not self.streaming:
            self._keep_b_beside_a()
            parted = parting_step(self.column("a").tokens, self.column("b").tokens)
            self.status(
                "both done: the files agree on every step"
                if parted is None
                else f"both done: the files' top choices part at step {parted}"
            )
        self.redraw()

    def on_reply_stream_errored(self, message: ReplyStream.Errored) -> None:
        side = self._side(message.reply_id)
        self.sessions[side].failed(message.message)
        self.streaming.discard(side)
        self.column(side).speed(f"error: {message.message}")
        self.status(f"{side.upper()}: {message.message}")

    def _keep_b_beside_a(self) -> None:
        """The history keeps B's reply as a branch beside A's (with B's model noted)."""
        a, b = self.sessions["a"], self.sessions["b"]
        ev = self.finished.get("b")
        last = a.tree.last
        if ev is None or "a" not in self.finished or last.role != "assistant":
            return
        a.keep_beside(last, ev, self.column("b").tokens, model=b.info)

    # ---- keys and the sampler ---------------------------------------------------------------

    def action_stop(self) -> None:
        for side in list(self.streaming):
            self.sessions[side].cancel()

    def action_step(self, delta: int) -> None:
        n = max(len(self.column(s).tokens) for s in SIDES)
        if not n:
            return
        current = self.cursor if self.cursor is not None else n
        self.cursor = max(0, min(n - 1, current + delta))
        self.redraw()

    def on_sampler_panel_settings_changed(self, message: SamplerPanel.SettingsChanged) -> None:
        self.settings = message.settings
        live = [self.sessions[s].change_settings(message.settings) for s in SIDES]
        when = "from the next token of both replies" if any(live) else "from the next prompt"
        self.status(f"sampler changed for both files, {when}")

    def on_unmount(self) -> None:
        for slot in self.slots.values():
            slot.close()
