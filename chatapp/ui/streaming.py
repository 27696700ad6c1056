"""The generation thread: reads engine events and posts batched messages to the UI."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.message import Message

from chatapp.engine.protocol import (
    EngineCrashed,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    Notice,
    PromptEvaluated,
    SettingsApplied,
    Token,
)
from chatapp.ui.messages import (
    NoticeShown,
    PromptShown,
    ReplyFailed,
    ReplyFinished,
    SettingsTookEffect,
    TokensArrived,
)

BATCH_S = 0.040  # one token message per ~40 ms; the first token goes at once
# The TUI's model worker runs this much below the UI's priority: when both want the CPU the
# UI's frame goes first (a frame waiting behind llama.cpp's threads was the lag on 2 cores).
WORKER_NICE = 5


def stream_reply(
    engine, request: GenerateRequest, reply_id: int, post: Callable[[Message], bool]
) -> None:
    """Run one reply to its end, posting messages; never raises."""
    batch: list[Token] = []
    last = 0.0
    first = True

    def flush() -> None:
        nonlocal batch, last
        if batch:
            post(TokensArrived(reply_id, batch))
            batch = []
        last = time.perf_counter()

    try:
        for event in engine.generate(request):
            if isinstance(event, Token):
                batch.append(event)
                if first or time.perf_counter() - last >= BATCH_S:
                    first = False
                    flush()
            elif isinstance(event, PromptEvaluated):
                post(PromptShown(reply_id, event))
            elif isinstance(event, SettingsApplied):
                flush()
                post(SettingsTookEffect(reply_id, event))
            elif isinstance(event, Notice):
                post(NoticeShown(event.message))
            elif isinstance(event, Finished):
                flush()
                post(ReplyFinished(reply_id, event))
                return
            elif isinstance(event, Failed):
                flush()
                post(ReplyFailed(reply_id, event.message))
                return
        flush()
        post(ReplyFailed(reply_id, "the reply ended without a finish event"))
    except EngineCrashed as exc:
        flush()
        post(ReplyFailed(reply_id, str(exc), exc.log_tail, crashed=True))
    except EngineError as exc:
        flush()
        post(ReplyFailed(reply_id, str(exc)))
    except Exception as exc:  # noqa: BLE001 - the UI must hear about every failure
        flush()
        post(ReplyFailed(reply_id, f"unexpected error: {type(exc).__name__}: {exc}"))
