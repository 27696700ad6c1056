"""One conversation with one engine, without a screen: turns, context fitting, the reply's life."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from chatapp.chat.context import fit_messages
from chatapp.chat.recorder import ChatHistory
from chatapp.chat.thinking import Split, ThinkingSplitter, opens_thinking, split_reply
from chatapp.engine.protocol import (
    ChatMessage,
    Engine,
    EngineError,
    Event,
    Failed,
    Finished,
    GenerateRequest,
    ModelInfo,
    PromptEvaluated,
    Token,
)
from chatapp.history.records import Conversation, Message, StoreError
from chatapp.sampling import SamplerSettings


@dataclass
class ReplyDraft:
    """The reply being written: the tokens it started from (continue, rewind), its text, and
    that text cut into reasoning and answer (thinking models)."""

    prefix: list[Token]
    text: str = ""
    tokens: list[Token] = field(default_factory=list)
    split: ThinkingSplitter = field(default_factory=ThinkingSplitter)
    starts_inside: bool = False  # the prompt opened the reasoning
    thinking_tokens: int = 0
    first_answer_t: float | None = None  # engine clock of the first token after the reasoning

    def __post_init__(self) -> None:
        self.tokens = list(self.prefix)
        self.text = "".join(t.text for t in self.prefix)
        self.split.feed(self.text)

    def think_from_start(self) -> None:
        """The prompt opened the reasoning: the reply (its prefix too) starts inside it."""
        self.starts_inside = True
        self.split = ThinkingSplitter(inside=True)
        self.split.feed(self.text)

    def extend(self, tokens: Sequence[Token]) -> None:
        for tok in tokens:
            thinking = self.split.in_thinking or self.split.state == "start"
            self.split.feed(tok.text)
            if thinking and (self.split.in_thinking or self.split.closed):
                self.thinking_tokens += 1  # (the </think> token counts as reasoning)
            elif self.first_answer_t is None and self.split.answer.strip():
                self.first_answer_t = tok.t
        self.tokens.extend(tokens)
        self.text += "".join(t.text for t in tokens)


@dataclass(frozen=True)
class Prepared:
    """A request ready to send, and how many of the oldest messages it leaves out."""

    request: GenerateRequest
    dropped: int


class ChatSession:
    """The conversation (what the model sees) and its history rows, driven by the TUI and by
    `chatapp ask` alike. Front ends map its results to the screen or to stdout.

    The reply's life: `add_user` (or nothing, for regenerate / continue / rewind), `prepare`
    (fits the context, opens the reply's row), then the engine's events (`took` for tokens,
    `finished` or `failed` at the end). `send` runs all of it for a caller without a loop of
    its own.
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
        self.engine: Engine | None = None
        self.info: ModelInfo | None = None
        self.conversation: list[ChatMessage] = []
        self.draft: ReplyDraft | None = None
        self.last_split: Split | None = None  # the last finished reply: reasoning and answer

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

    # ---- turns --------------------------------------------------------------------------

    def messages(self) -> list[ChatMessage]:
        """What the model is shown: the system prompt, then the conversation."""
        head = [ChatMessage("system", self.system_prompt)] if self.system_prompt else []
        return head + self.conversation

    def fitted(self) -> tuple[list[ChatMessage], int]:
        """The messages that fit the context with room for the reply, and how many of the
        oldest were left out (the history keeps them all)."""
        messages = self.messages()
        n_ctx = self.info.n_ctx if self.info else 0
        budget = min(self.settings.max_tokens, n_ctx // 2)
        # Every token is at least one character: a short conversation surely fits.
        if self.engine is None or not n_ctx:
            return messages, 0
        if sum(len(m.content) for m in messages) <= n_ctx - budget:
            return messages, 0
        try:
            return fit_messages(messages, self.engine.count_tokens, n_ctx, budget)
        except EngineError:
            return messages, 0

    def add_user(self, text: str) -> None:
        self.conversation.append(ChatMessage("user", text))
        self.history.save_user(text, self.system_prompt, self.settings)

    def prepare(self, prefix: Sequence[Token] = ()) -> Prepared:
        """The request for the next reply (continuing `prefix`, if given); opens its row."""
        kept, dropped = self.fitted()
        self.draft = ReplyDraft(list(prefix))
        self.history.begin_reply(self.settings)
        request = GenerateRequest(
            messages=tuple(kept),
            settings=self.settings,
            stop=self.stop,
            reply_prefix_ids=tuple(t.id for t in prefix),
            top_n=self.top_n,
            ignore_eos=self.ignore_eos,
            enable_thinking=self.enable_thinking,
            draft=self.speculation,
        )
        return Prepared(request, dropped)

    def prompt_evaluated(self, event: PromptEvaluated) -> None:
        """The engine rendered and read the prompt; if it opened the model's reasoning, the
        reply starts inside it."""
        if self.draft is not None and opens_thinking(event.rendered):
            self.draft.think_from_start()

    def took(self, tokens: Sequence[Token]) -> None:
        """Tokens of the reply arrived; its text is saved at most once a second."""
        draft = self.draft
        if draft is None:
            return
        draft.extend(tokens)
        self.history.stream(draft.text)

    def finished(self, event: Finished) -> Split:
        """The reply ended (complete, stopped or cut): its answer joins the conversation (the
        reasoning is not shown to the model again, as thinking templates do), the history keeps
        the whole text. Returns the reply cut into reasoning and answer."""
        split = split_reply(event.text, inside=self.draft is not None and self.draft.starts_inside)
        answer = split.answer if (split.thinking or split.closed) else event.text
        self.conversation.append(ChatMessage("assistant", answer))
        self.history.finish(event.text, event, self.settings)
        self.draft = None
        self.last_split = split
        return split

    def failed(self, message: str) -> str:
        """The reply failed: what it wrote so far stays (and is returned)."""
        text = self.draft.text if self.draft else ""
        if text:
            self.conversation.append(ChatMessage("assistant", text))
        self.history.finish(text, None, self.settings, error=message, kept=bool(text))
        self.draft = None
        return text

    def send(self, text: str | None = None) -> Iterator[Event]:
        """Add `text` as a user turn (if given), generate the reply and keep the books: the
        engine's events pass through. For callers without an event loop (`chatapp ask`)."""
        if self.engine is None:
            raise EngineError("no model is loaded")
        if text is not None:
            self.add_user(text)
        prepared = self.prepare()
        ended = False
        try:
            for event in self.engine.generate(prepared.request):
                if isinstance(event, PromptEvaluated):
                    self.prompt_evaluated(event)
                elif isinstance(event, Token):
                    self.took([event])
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

    # ---- editing the conversation -------------------------------------------------------

    def drop_last_reply(self) -> bool:
        """Take the last reply out (regenerate, continue, rewind); False if there is none."""
        if not self.conversation or self.conversation[-1].role != "assistant":
            return False
        self.conversation.pop()
        self.history.drop_from(len(self.conversation))
        return True

    def take_last_user(self) -> str | None:
        """Take the last user turn and everything after it out, returning its text (edit)."""
        idx = max((i for i, m in enumerate(self.conversation) if m.role == "user"), default=None)
        if idx is None:
            return None
        text = self.conversation[idx].content
        del self.conversation[idx:]
        self.history.drop_from(idx)
        return text

    def new_chat(self) -> None:
        self.conversation.clear()
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
        kept = [m for m in store.messages(conversation_id) if m.role != "system"]
        self.system_prompt = conv.system_prompt
        if conv.sampler is not None:
            self.settings = conv.sampler
        self.conversation = [ChatMessage(m.role, m.text) for m in kept]
        self.history.resume(conversation_id, [m.id for m in kept])
        return conv, kept
