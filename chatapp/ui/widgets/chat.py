"""The chat pane: user and assistant messages; replies stream in as Markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.markdown import Markdown as RichMarkdown
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.visual import visualize
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from chatapp.chat.thinking import split_reply
from chatapp.textsafe import printable
from chatapp.ui.literal import literal

# A message longer than this shows its start only: wrapping a megabyte would freeze the UI.
SHOWN_CHARS = 20_000

if TYPE_CHECKING:  # the paragraph class Markdown.BLOCKS names (Textual does not export it)
    from textual.widgets._markdown import MarkdownParagraph
else:
    MarkdownParagraph = Markdown.BLOCKS["paragraph_open"]


class SteadyParagraph(MarkdownParagraph):
    """A streamed paragraph that asks for a layout pass only when its height changes: most
    token batches extend the last line, and a layout pass walks every widget on the screen."""

    def set_content(self, content) -> None:
        width = self.content_size.width
        if self.is_mounted and width:
            visual = visualize(self, content, markup=False)
            # Textual's Widget passes its styles here too; the annotation says RulesMap
            height = visual.get_height(self.styles, width)  # type: ignore[arg-type]
            if height == self.content_size.height:
                self._content = content
                self.update(content, layout=False)
                return
        super().set_content(content)


class StreamingMarkdown(Markdown):
    """Textual's Markdown with steady paragraphs, for the reply being streamed."""

    BLOCKS = {**Markdown.BLOCKS, "paragraph_open": SteadyParagraph}


class MessageView(Vertical):
    """One message. A reply streams through Textual's MarkdownStream; a finished message is a
    single Static holding one Rich rendering (role, body, stats footer): two widgets per
    message, so the many finished messages cost each layout pass little."""

    COMPONENT_CLASSES = {"messageview--role", "messageview--footer", "messageview--draft"}
    DEFAULT_CSS = """
    MessageView { height: auto; margin: 0 0 1 0; padding: 0 1; }
    MessageView > .messageview--role { color: $text-muted; text-style: bold; }
    MessageView > .messageview--footer { color: $text-muted; }
    MessageView > .messageview--draft { color: $token-draft; text-style: underline; }
    MessageView.user { background: $boost; border-left: thick $accent; }
    MessageView.assistant { border-left: thick $primary; }
    MessageView.error { border-left: thick $error; }
    MessageView.left-out { opacity: 55%; border-left: thick $warning; }
    MessageView > Markdown { margin: 0; padding: 0; background: transparent; }
    MessageView > .body { height: auto; }
    MessageView > .role-line { color: $text-muted; text-style: bold; height: 1; }
    MessageView > Collapsible.thinking { margin: 0; padding: 0; border: none;
        background: transparent; color: $text-muted; }
    MessageView > Collapsible.thinking Contents { padding: 0 0 0 2; }
    MessageView > Collapsible.thinking .thinking-text { color: $text-muted; text-style: italic; }
    """

    def __init__(self, role: str, text: str = "", footer: str = "") -> None:
        super().__init__(classes=role)
        self.role = role
        self.thinking = ""  # a thinking model's reasoning, shown folded above the answer
        self.thinking_label = "Thinking"
        if role == "assistant" and text:
            split = split_reply(text)  # (a stored reply keeps its reasoning in its text)
            if split.thinking:
                text, self.thinking = split.answer, split.thinking
        self.text = text
        self._footer = footer
        self.branch = ""  # e.g. "branch 2/3": the message has other branches
        self.marked: list[tuple[str, bool]] | None = None  # the reply as (text, drafted) pieces
        self.marked_cursor: int | None = None  # the piece shown reversed (a step selected)
        self._stream: MarkdownStream | None = None
        self._painted_look: tuple = ()

    @property
    def footer(self) -> str:
        """The stats line under the message ("" for none)."""
        return self._footer

    def compose(self) -> ComposeResult:
        if self.thinking:
            yield Static(classes="role-line")
            yield self._thinking_block(collapsed=True)
        yield Static(classes="body")

    def _thinking_block(self, collapsed: bool) -> Collapsible:
        text = Static(literal(self.thinking[-SHOWN_CHARS:]), classes="thinking-text")
        return Collapsible(text, title=self.thinking_label, collapsed=collapsed, classes="thinking")

    async def write_thinking(self, delta: str, label: str) -> None:
        """Append streamed reasoning: it shows unfolded while the model thinks."""
        self.thinking += delta
        self.thinking_label = label
        blocks = self.query(Collapsible)
        if not blocks:
            await self._mount_thinking(collapsed=False)
            return
        block = blocks.first()
        block.title = label
        block.query_one(".thinking-text", Static).update(literal(self.thinking[-SHOWN_CHARS:]))

    async def _mount_thinking(self, collapsed: bool) -> None:
        await self.mount_all(
            [Static(classes="role-line"), self._thinking_block(collapsed)], before=0
        )
        self._paint()

    def fold_thinking(self, label: str) -> None:
        """The answer began (or the reply ended): the reasoning folds to one line."""
        self.thinking_label = label
        for block in self.query(Collapsible):
            block.title = label
            block.collapsed = True

    def on_mount(self) -> None:
        self._paint()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # A new theme changes the role and footer colours (and the code theme); hover and
        # class changes arrive here too, and must not re-render a long message each time.
        if self.is_mounted and self._look() != self._painted_look:
            self._paint()

    def _look(self) -> tuple:
        return (
            self.get_component_rich_style("messageview--role"),
            self.get_component_rich_style("messageview--footer"),
            self.app.current_theme.dark,
        )

    def _paint(self) -> None:
        """Draw role, body (unless it is streaming in the Markdown widget) and footer."""
        label = {"user": "You", "assistant": "Assistant", "system": "System"}.get(
            self.role, self.role
        )
        self._painted_look = look = self._look()
        role = Text(label, style=look[0])
        if self.branch:
            role.append(f"  ‹ {self.branch} ›  alt+←/→", style=look[1])
        heads = self.query(".role-line")
        if heads:  # a thinking reply: role, folded reasoning, then the answer
            heads.first(Static).update(role)
        parts: list = [] if heads else [role]
        if self._stream is None:  # (while streaming, not even a continued reply's old stats)
            parts.append(self._body())
            if self._footer:
                parts.append(literal(self._footer, style=look[1]))
        body = self.query_one(".body", Static)
        body.display = bool(parts)
        body.update(Group(*parts))

    def show_marked(self, pieces: list[tuple[str, bool]] | None, cursor: int | None = None) -> None:
        """Show the reply as its tokens' text with the ones from accepted drafts marked
        (None: as Markdown again), the piece at `cursor` reversed."""
        self.marked = pieces
        self.marked_cursor = cursor
        self._paint()

    def _body(self):
        if self.marked is not None:
            style = self.get_component_rich_style("messageview--draft")
            at = self.marked_cursor
            return Text.assemble(
                *(
                    (printable(t), "reverse" if i == at else style if d else "")
                    for i, (t, d) in enumerate(self.marked)
                )
            )
        text = printable(self.text[:SHOWN_CHARS])
        more = len(self.text) - SHOWN_CHARS
        body: Text | RichMarkdown
        if self.role == "user":
            body = Text(text)
        else:
            dark = self.app.current_theme.dark if self.is_attached else True
            body = RichMarkdown(text, code_theme="monokai" if dark else "default")
        if more > 0:
            note = Text(f"… {more:,} more characters (kept in the conversation)", style="dim")
            return Group(body, note)
        return body

    async def start_stream(self) -> MarkdownStream:
        """Mount a live Markdown widget under the role line and open a stream on it (once);
        the stream."""
        if self._stream is None:
            live = StreamingMarkdown(printable(self.text[-SHOWN_CHARS:]))
            await self.mount(live, after=self.query_one(".body"))
            self._stream = Markdown.get_stream(live)
            self._paint()
        return self._stream

    async def write(self, delta: str) -> None:
        """Append streamed text (cheap: no re-parse of what is already shown)."""
        self.text += delta
        stream = await self.start_stream()
        await stream.write(printable(delta))

    async def finish(
        self,
        text: str,
        footer: str = "",
        thinking: str = "",
        thinking_label: str = "",
        fold: bool = True,
    ) -> None:
        """One full render of the final text (closes half-drawn code fences); a thinking
        model's reasoning stays folded above it."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.text = text
        self._footer = footer
        for live in self.query(Markdown):
            await live.remove()
        if thinking:
            self.thinking = thinking
            if not self.query(Collapsible):
                await self._mount_thinking(collapsed=True)
            block = self.query_one(Collapsible)
            block.query_one(".thinking-text", Static).update(literal(thinking[-SHOWN_CHARS:]))
            if fold:
                self.fold_thinking(thinking_label or self.thinking_label)
            else:  # the reply ended while still thinking: that is all there is to read
                block.title = thinking_label or self.thinking_label
        self._paint()

    def set_branch(self, branch: str) -> None:
        """Say which branch the message is (e.g. "branch 2/3"; "" when it has no others)."""
        if branch != self.branch:
            self.branch = branch
            if self.is_mounted:
                self._paint()


class ChatView(VerticalScroll):
    """The conversation; follows the bottom unless the user scrolled up.

    Only the newest MAX_MOUNTED messages are widgets: older ones stay in the conversation and
    the history database, so a long chat costs a new reply nothing extra to lay out.
    """

    MAX_MOUNTED = 40
    DEFAULT_CSS = """
    ChatView { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
    ChatView > #hidden-count { color: $text-muted; height: auto; margin: 0 0 1 0;
        text-style: italic; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hidden = 0

    def compose(self):
        yield Static("", id="hidden-count")

    def on_mount(self) -> None:
        self.anchor()
        self.query_one("#hidden-count").display = False

    async def add(self, role: str, text: str = "", footer: str = "") -> MessageView:
        item = MessageView(role, text, footer)
        await self.add_items([item])
        return item

    async def add_items(self, items: list[MessageView]) -> None:
        await self.mount_all(items)
        excess = len(self.items()) - self.MAX_MOUNTED
        if excess > 0:
            await self.remove_children(self.items()[:excess])
            self.hidden += excess
            label = self.query_one("#hidden-count", Static)
            label.update(f"… {self.hidden} earlier messages are kept but not shown")
            label.display = True

    async def clear(self) -> None:
        await self.remove_children(self.items())
        self.hidden = 0
        self.query_one("#hidden-count").display = False

    def items(self) -> list[MessageView]:
        return list(self.query_children(MessageView))

    def dim_left_out(self, reply_item: MessageView, total: int, dropped: int) -> None:
        """Dim the messages the prompt leaves out (the `dropped` oldest of the conversation's
        `total`; `reply_item`, the reply being written, is not one); the history keeps them."""
        items = [it for it in self.items() if it is not reply_item]
        offset = total - len(items)
        for i, it in enumerate(items):
            it.set_class(i + offset < dropped, "left-out")
