"""Messages the generation thread posts to the UI (timing travels inside them)."""

from __future__ import annotations

from textual.message import Message

from chatapp.engine.protocol import (
    Finished,
    ModelInfo,
    PromptEvaluated,
    SettingsApplied,
    Token,
)


class EngineReady(Message):
    """A model loaded: its info, and the started engine (handed to the app on its own thread:
    the loading worker never assigns app state)."""

    def __init__(self, info: ModelInfo, engine: object = None) -> None:
        super().__init__()
        self.info = info
        self.engine = engine


class EngineFailed(Message):
    """The engine could not start, or its worker died; `log_tail` has llama.cpp's last lines."""

    def __init__(self, message: str, log_tail: str = "", crashed: bool = False) -> None:
        super().__init__()
        self.message = message
        self.log_tail = log_tail
        self.crashed = crashed


class PromptShown(Message):
    def __init__(self, reply_id: int, event: PromptEvaluated) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.event = event


class PrefillProgressed(Message):
    """A long prompt is being read: how far (a newer one replaces an older one)."""

    def __init__(self, reply_id: int, done: int, total: int, elapsed_s: float) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.done, self.total, self.elapsed_s = done, total, elapsed_s

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PrefillProgressed)


class TokensArrived(Message):
    """A batch of tokens (never dropped: every token must reach the chat)."""

    def __init__(self, reply_id: int, tokens: list[Token]) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.tokens = tokens


class SettingsTookEffect(Message):
    def __init__(self, reply_id: int, event: SettingsApplied) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.event = event


class NoticeShown(Message):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class ReplyFinished(Message):
    def __init__(self, reply_id: int, event: Finished) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.event = event


class ReplyFailed(Message):
    def __init__(
        self, reply_id: int, message: str, log_tail: str = "", crashed: bool = False
    ) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.message = message
        self.log_tail = log_tail
        self.crashed = crashed
