"""The panels that follow a conversation's live reply and its model, and the feed they join."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar, TypeVar

from textual.dom import DOMNode
from textual.message import Message
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane

from chatapp.chat.live_reply import LiveReply
from chatapp.engine.capabilities import NOTHING, Capabilities
from chatapp.engine.protocol import ModelInfo


@dataclass(frozen=True)
class LoadedModel:
    """A conversation's model, as its panels see it: its state ("loading", "ready", "tuned":
    the same load with the tune's settings, "no model"), its facts and what its engine can do
    (kept while the next one loads)."""

    state: str = "loading"
    info: ModelInfo | None = None
    capabilities: Capabilities = field(default=NOTHING)

    def now(self, state: str) -> LoadedModel:
        return replace(self, state=state)

    def can(self, need: str) -> bool:
        """Whether the engine has capability `need` (a Capabilities field; "": none needed),
        or no model has been loaded yet to say otherwise."""
        return not need or self.info is None or bool(asdict(self.capabilities)[need])


W = TypeVar("W", bound="LivePanel")


class LiveFeed:
    """One conversation's live-reply panels, joined by themselves (LivePanel.Joined); the
    conversation hands them its reply and `owner` keeps the `model` reactive they watch."""

    def __init__(self, owner: DOMNode) -> None:
        self.owner = owner
        self.panels: list[LivePanel] = []

    def join(self, panel: LivePanel) -> None:
        if panel not in self.panels:
            self.panels.append(panel)
            panel.watch(self.owner, "model", panel.model_changed)

    def leave(self, panel: LivePanel) -> None:
        if panel in self.panels:
            self.panels.remove(panel)

    def find(self, kind: type[W]) -> W:
        """The joined panel of class `kind` (the conversation's one of each)."""
        return next(p for p in self.panels if isinstance(p, kind))

    def hand(self, live: LiveReply | None, streamed: bool) -> None:
        """Each panel gets `live`; one that shows only replies streamed (the Speed panel) gets it
        only then (`streamed`), and never None."""
        for panel in self.panels:
            if panel.follows_branches or (streamed and live is not None):
                panel.reply = live

    def reply_begins(self) -> None:
        for panel in self.panels:
            panel.reply_begins()

    def reply_ended(self, notes: str) -> None:
        for panel in self.panels:
            panel.reply_ended(notes)


class LivePanel(Widget):
    """A panel that follows its conversation's live reply (`reply`, redrawn in its watcher) and
    its model: on mount it joins the conversation (the screen that laid it out hands its Joined
    message to the conversation's LiveFeed), and it hides itself (and its tab) while the model's
    engine lacks the capability it `needs`."""

    DEFAULT_CSS = "LivePanel.-lacking { display: none; }"

    needs: ClassVar[str] = ""
    """The Capabilities field this panel needs ("": none)."""
    follows_branches: ClassVar[bool] = True
    """Shows a reply looked at again (a branch switched to), not only the one streamed."""

    reply: var[LiveReply | None] = var(None, always_update=True)
    """The reply shown (its tokens grow as it streams)."""

    @dataclass
    class Joined(Message):
        """A live panel was mounted: the conversation its screen lays it out for feeds it."""

        panel: LivePanel

    def on_mount(self) -> None:
        self.post_message(self.Joined(self))

    def model_changed(self, model: LoadedModel | None) -> None:
        """The conversation's model changed (its `model` reactive): shown or hidden by what
        its engine can do; subclasses show its facts."""
        if model is not None and self.needs:
            self._show(model.can(self.needs))

    def _show(self, able: bool) -> None:
        """Shown or hidden, with the tab it is in, if any."""
        self.set_class(not able, "-lacking")
        tab = next((a for a in self.ancestors if isinstance(a, TabPane)), None)
        tabs = next((a for a in self.ancestors if isinstance(a, TabbedContent)), None)
        if tab is None or not tab.id or tabs is None:
            return
        if able:
            tabs.show_tab(tab.id)
        else:
            tabs.hide_tab(tab.id)

    def reply_begins(self) -> None:
        """A reply starts streaming."""

    def reply_ended(self, notes: str) -> None:
        """The streamed reply is over; `notes`: what the Speed panel says about it."""
