"""One conversation with one engine, without a screen: turns, context fitting, the reply's life."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from chatapp.chat.attachments import Attachment, compose, message_fit_problem, reply_budget
from chatapp.chat.branches import Tree, Turn
from chatapp.chat.context import fit_messages, left_out_note
from chatapp.chat.editing import ConversationEdits
from chatapp.chat.editing import PickError as PickError
from chatapp.chat.lesson import Measured
from chatapp.chat.live_reply import LiveReply
from chatapp.chat.recorder import ChatHistory
from chatapp.chat.thinking import Split, opens_thinking, split_reply
from chatapp.engine.protocol import (
    ChatMessage,
    Engine,
    EngineError,
    Event,
    Failed,
    Finished,
    GenerateRequest,
    Grammar,
    ModelInfo,
    PromptEvaluated,
    SettingsApplied,
    SteeringApplied,
    StopReason,
    Token,
)
from chatapp.engine.steering import STEERING_OFF, Steering
from chatapp.history.records import Conversation, Message, StoreError
from chatapp.sampling import SamplerSettings


@dataclass(frozen=True)
class Prepared:
    """A request ready to send, the reply it opens (the session's `draft`), and how many of the
    oldest messages it leaves out; `note` says so in one line when that number changed since
    the last request ("" otherwise)."""

    request: GenerateRequest
    reply: LiveReply
    dropped: int
    note: str = ""


class ChatSession:
    """The conversation (what the model sees) and its history rows, driven by the TUI and by
    `chatapp ask` alike. Front ends map its results to the screen or to stdout.

    The reply's life: `add_user` (or nothing, for regenerate / continue / rewind / pick),
    `prepare` (fits the context, opens the reply's row), then the engine's events (`took` for
    tokens, `finished` or `failed` at the end). `send` runs all of it for a caller without a
    loop of its own.

    The conversation is a tree (`tree`): a reply made again (regenerate, rewind, a picked
    token) is a branch beside the earlier ones, and `edits.switch_branch` chooses the one the
    conversation goes on with; `conversation` is the chosen path. The edits of the tree (drop,
    set aside, pick, switch branches) are its `edits` (ConversationEdits).
    """

    def __init__(
        self,
        history: ChatHistory | None = None,
        settings: SamplerSettings | None = None,
        system_prompt: str = "",
        top_n: int = 10,
    ) -> None:
        self.history = history or ChatHistory(None, lambda message: None)
        self.settings = settings or SamplerSettings()
        self.system_prompt = system_prompt
        self.top_n = top_n  # candidates reported per token
        self.ignore_eos = False  # benchmarks: replies of exactly max_tokens
        self.stop: tuple[str, ...] = ()
        self.enable_thinking: bool | None = None  # thinking models: on / off / the template's
        self.speculation = ""  # draft tokens from "ngram", the draft "model", or "" (none)
        self.alternatives = 1  # replies the next request decodes together (regenerate x N)
        self.grammar: Grammar | None = None  # what replies must follow (a schema's, a GBNF's)
        self.steering: Steering | None = None  # control vectors for the next replies
        self.last_steering: Steering | None = None  # the last reply's, with its changes
        self.measured = Measured()  # the last lens, concept meter and compare (the lesson's)
        self.engine: Engine | None = None
        self.info: ModelInfo | None = None
        self.tree = Tree()
        self.draft: LiveReply | None = None  # the reply being written
        self.last_split: Split | None = None  # the last finished reply: reasoning and answer
        self.left_out = 0  # the oldest messages the last request left out to fit the context
        self.edits = ConversationEdits(self)  # drop, set aside, pick, walk and switch branches

    # ---- the engine ---------------------------------------------------------------------

    def attach(self, engine: Engine, info: ModelInfo) -> None:
        self.engine = engine
        self.info = info
        self.history.set_model(info)

    def detach(self) -> None:
        """The engine died or is being replaced: the conversation stays."""
        self.engine = None

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.engine.alive

    @property
    def streaming(self) -> bool:
        return self.draft is not None

    def cancel(self) -> None:
        """Ask the reply in progress to stop (within one token)."""
        if self.draft is not None and self.engine is not None:
            try:
                self.engine.cancel()
            except EngineError:
                pass

    def kill(self, reason: str = "it did not stop when asked") -> None:
        if self.draft is not None and self.engine is not None:
            self.engine.kill(reason)

    def change_settings(self, settings: SamplerSettings) -> bool:
        """New sampler settings; True when they reach the reply in progress (next token)."""
        self.settings = settings
        if self.draft is None or self.engine is None:
            return False
        self.engine.update_settings(settings)
        return True

    def change_steering(self, steering: Steering) -> bool:
        """New steering (a Steer panel's slider); True when it reaches the reply in progress
        (its SteeringApplied event says from which token). Raises SteeringError."""
        self.steering = steering
        if self.draft is None or self.engine is None:
            return False
        self.engine.set_steering(steering)
        return True

    def steering_applied(self, event: SteeringApplied) -> None:
        """The engine changed the steering mid-reply: kept with the reply in history (a reply
        begun unsteered too: its record then starts with no vectors)."""
        if self.draft is not None:
            self.draft.steering_changes.append((event.index, event.steering))
        before = self.last_steering or STEERING_OFF
        change = (event.index, event.steering.vectors)
        self.last_steering = replace(before, changes=(*before.changes, change))

    # ---- turns --------------------------------------------------------------------------

    @property
    def conversation(self) -> list[ChatMessage]:
        """What the model is shown of the conversation: the turns of the chosen branches."""
        return [t.message for t in self.tree.path()]

    @conversation.setter
    def conversation(self, messages: list[ChatMessage]) -> None:
        self.tree = Tree.linear(list(messages))

    def messages(self) -> list[ChatMessage]:
        """What the model is shown: the system prompt, then the conversation."""
        head = [ChatMessage("system", self.system_prompt)] if self.system_prompt else []
        return head + self.conversation

    def fitted(self) -> tuple[list[ChatMessage], int]:
        """The messages that fit the context with room for the reply, and how many of the
        oldest were left out (the history keeps them all)."""
        messages = self.messages()
        n_ctx = self.info.n_ctx if self.info else 0
        budget = reply_budget(self.settings.max_tokens, n_ctx)
        # Every token is at least one character: a short conversation surely fits.
        if self.engine is None or not n_ctx:
            return messages, 0
        if sum(len(m.content) for m in messages) <= n_ctx - budget:
            return messages, 0
        try:
            return fit_messages(messages, self.engine.count_tokens, n_ctx, budget)
        except EngineError:
            return messages, 0

    def too_long(self, text: str, attachments: Sequence[Attachment] = ()) -> str:
        """One sentence with the numbers when a message (with its files, and the system prompt
        that always goes with it) cannot fit the context even alone with room for the reply;
        "" when it can, or when that cannot be told (no model, no token count)."""
        n_ctx = self.info.n_ctx if self.info else 0
        if self.engine is None or not n_ctx:
            return ""
        budget = reply_budget(self.settings.max_tokens, n_ctx)
        return message_fit_problem(
            self.engine, n_ctx, budget, self.system_prompt, text, attachments
        )

    def add_user(self, text: str, attachments: Sequence[Attachment] = ()) -> None:
        """A user turn: the text, then each attached file as a fenced block headed by its name
        (the history also keeps the files apart)."""
        text = compose(text, tuple(attachments)) if attachments else text
        files = tuple(a.to_dict() for a in attachments)
        row = self.history.save_user(
            text, self.system_prompt, self.settings, self.tree.last.row, files
        )
        self.tree.add(Turn(ChatMessage("user", text), text, row))

    def prepare(self, prefix: Sequence[Token] = (), raw: bool = False) -> Prepared:
        """The request for the next reply (continuing `prefix`, if given); opens its row.
        raw: the last user message is the whole prompt, without the chat template."""
        submitted = time.perf_counter()
        kept, dropped = self.fitted()
        self.draft = LiveReply(list(prefix), self.settings, submitted)
        steering = self.steering if self.steering is not None and self.steering.active else None
        self.last_steering = steering
        self.history.begin_reply(self.settings, self.tree.last.row, steering)
        request = GenerateRequest(
            messages=tuple(kept),
            settings=self.settings,
            stop=self.stop,
            reply_prefix_ids=tuple(t.id for t in prefix),
            top_n=self.top_n,
            ignore_eos=self.ignore_eos,
            enable_thinking=self.enable_thinking,
            draft=self.speculation,
            n_alternatives=self.alternatives if not prefix else 1,
            grammar=self.grammar,
            steering=steering,
            raw_prompt=self.conversation[-1].content if raw else None,
        )
        self.alternatives = 1  # (once: the next reply is one again)
        changed, self.left_out = dropped != self.left_out, dropped
        note = left_out_note(dropped, self.info.n_ctx if self.info else 0) if changed else ""
        return Prepared(request, self.draft, dropped, note)

    def prompt_evaluated(self, event: PromptEvaluated) -> None:
        """The engine rendered and read the prompt; if it opened the model's reasoning, the
        reply starts inside it."""
        if self.draft is None:
            return
        self.draft.prompt = event
        if opens_thinking(event.rendered):
            self.draft.think_from_start()

    def took(self, tokens: Sequence[Token]) -> list[Token]:
        """Tokens of the reply arrived; its text is saved at most once a second. Returns the
        ones to show: with several replies decoded together (regenerate x N), the first's."""
        draft = self.draft
        if draft is None:
            return []
        shown = draft.extend(tokens)
        self.history.stream(draft.text)
        return shown

    def settings_applied(self, index: int, settings: SamplerSettings) -> None:
        """New sampler settings took effect from token `index` of the reply."""
        if self.draft is not None:
            self.draft.settings_changes.append((index, settings))

    def finished(self, event: Finished) -> Split:
        """The reply ended (complete, stopped or cut): its answer joins the conversation (the
        reasoning is not shown to the model again, as thinking templates do), the history keeps
        the whole text. Returns the reply cut into reasoning and answer."""
        split = split_reply(event.text, inside=self.draft is not None and self.draft.starts_inside)
        answer = split.answer if (split.thinking or split.closed) else event.text
        row = self.history.finish(event.text, event, self.settings, steering=self.last_steering)
        tokens = tuple(self.draft.tokens) if self.draft is not None else ()
        first = self.tree.add(Turn(ChatMessage("assistant", answer), event.text, row, tokens))
        alternatives = self.draft.alternatives if self.draft is not None else {}
        if self.draft is not None:
            self.draft.finished = event
        self.draft = None
        self.last_split = split
        self._add_alternatives(event, first, alternatives)
        return split

    def _add_alternatives(
        self, event: Finished, first: Turn, tokens: dict[int, list[Token]]
    ) -> None:
        """The other replies of a batch join as branches beside the first (which stays the
        chosen one); each is saved as a message of its own."""
        for seq, text in enumerate(event.alternatives[1:], start=1):
            reason = event.alternative_reasons[seq] if seq < len(event.alternative_reasons) else ""
            ended = replace(event, text=text, reason=StopReason(reason or event.reason))
            self.keep_beside(first, ended, tokens.get(seq, ()))

    def keep_beside(
        self,
        turn: Turn,
        event: Finished,
        tokens: Sequence[Token] = (),
        model: ModelInfo | None = None,
    ) -> Turn:
        """Save a finished reply as another branch beside `turn` (which stays the chosen one),
        made by `model` when that is not this session's (side by side)."""
        parent = turn.parent.row if turn.parent is not None else None
        if model is not None:
            self.history.set_model(model)
        self.history.begin_reply(self.settings, parent)
        row = self.history.finish(event.text, event, self.settings)
        if model is not None:
            self.history.set_model(self.info)
        self.history.choose(turn.row)
        answer = split_reply(event.text, inside=False).answer or event.text
        kept = Turn(ChatMessage("assistant", answer), event.text, row, tuple(tokens))
        return self.tree.add_beside(kept, turn)

    def failed(self, message: str) -> str:
        """The reply failed: what it wrote so far stays (and is returned)."""
        text = self.draft.text if self.draft else ""
        tokens = tuple(self.draft.tokens) if self.draft else ()
        row = self.history.finish(
            text, None, self.settings, error=message, steering=self.last_steering
        )
        if text:
            self.tree.add(Turn(ChatMessage("assistant", text), text, row, tokens))
        else:  # nothing written: the reply it was to replace (if any) is the chosen one again
            self.tree.restore()
            self.history.choose(self.tree.last.row if self.tree.last.role == "assistant" else None)
        if self.draft is not None:
            self.draft.error = message
        self.draft = None
        return text

    def send(
        self, text: str | None = None, attachments: Sequence[Attachment] = (), raw: bool = False
    ) -> Iterator[Event]:
        """Add `text` (with its attached files) as a user turn (if given), generate the reply
        and keep the books: the engine's events pass through. For callers without an event
        loop (`chatapp ask`); raw: that text is the prompt, without the chat template."""
        if self.engine is None:
            raise EngineError("no model is loaded")
        if text is not None:
            self.add_user(text, attachments)
        prepared = self.prepare(raw=raw)
        ended = False
        try:
            for event in self.engine.generate(prepared.request):
                if isinstance(event, PromptEvaluated):
                    self.prompt_evaluated(event)
                elif isinstance(event, Token):
                    self.took([event])
                elif isinstance(event, SettingsApplied):
                    self.settings_applied(event.index, event.settings)
                elif isinstance(event, SteeringApplied):
                    self.steering_applied(event)
                elif isinstance(event, Finished):
                    self.finished(event)
                    ended = True
                elif isinstance(event, Failed):
                    self.failed(event.message)
                    ended = True
                yield event
        finally:
            if not ended and self.draft is not None:
                self.failed("the reply ended without a finish event")

    def new_chat(self) -> None:
        self.tree = Tree()
        self.left_out = 0
        self.history.new_conversation()

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt = text
        self.history.update_meta(text)

    def resume(self, conversation_id: int) -> tuple[Conversation, list[Message]]:
        """Open a saved conversation: its messages, system prompt and settings. Returns the
        conversation record and its messages; raises StoreError if it cannot be read."""
        store = self.history.store
        if store is None:
            raise StoreError("history is not available in this session")
        conv = store.get_conversation(conversation_id)
        records = store.all_messages(conversation_id)
        shown = {m.id: ChatMessage(m.role, m.text) for m in records if m.role != "system"}
        self.tree = Tree.from_records(records, shown)
        self.left_out = 0
        self.system_prompt = conv.system_prompt
        if conv.sampler is not None:
            self.settings = conv.sampler
        self.history.resume(conversation_id)
        return conv, [t.record for t in self.tree.path() if t.record is not None]
