"""The generation thread: reads engine events and posts batched messages to the UI."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from chatapp.engine.protocol import (
    EngineCrashed,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    ModelInfo,
    Notice,
    PrefillProgress,
    PromptEvaluated,
    SettingsApplied,
    Token,
    fills_the_cpu,
)
from chatapp.ui.messages import (
    NoticeShown,
    PrefillProgressed,
    PromptShown,
    ReplyFailed,
    ReplyFinished,
    SettingsTookEffect,
    TokensArrived,
)


@dataclass(frozen=True)
class Cadence:
    """How often a streaming reply reaches the screen: the text and the side panels."""

    text_s: float  # one token message per this long (the shortest, when paced by a budget)
    panels_s: float
    budget: float | None = None  # share of one core the UI may use while a reply streams
    ceiling_s: float = 1.0  # the longest wait between text frames, whatever they cost


# Every frame costs the UI process a few ms of CPU (Textual lays out and renders the screen),
# and when llama.cpp's threads fill every core, each of those ms stalls all of its threads at
# their next barrier: the model slows by about the UI's share of a core (on 2 cores, 25 frames
# a second cost it a quarter of its speed; `chatapp bench --terminal`). So a model on the CPU
# gets frames paced to a CPU budget (ui/pacing.py). Measured on a 2-core Xeon (8 pairs each):
# a budget of 3% of a core gave 0.949x `chatapp ask`'s decode, 2% gave 0.979x (frames every
# ~0.25 s, stretching towards the 1 s ceiling as a long paragraph makes each frame dearer).
SMOOTH = Cadence(text_s=0.040, panels_s=0.15)
LIGHT = Cadence(text_s=0.100, panels_s=1.0, budget=0.02, ceiling_s=1.0)


def cadence_for(info: ModelInfo | None, cores: int) -> Cadence:
    """LIGHT when the model's threads run on the CPU and leave no core for the UI."""
    return LIGHT if info is not None and fills_the_cpu(info, cores) else SMOOTH


# The TUI's model worker runs this much below the UI's priority: when both want the CPU the
# UI's frame goes first (a frame waiting behind llama.cpp's threads was the lag on 2 cores).
WORKER_NICE = 5


def stream_reply(
    engine,
    request: GenerateRequest,
    reply_id: int,
    post: Callable[[Message], bool],
    batch_s: Callable[[], float] = lambda: SMOOTH.text_s,
) -> None:
    """Run one reply to its end, posting messages; never raises. `batch_s()` is the time
    between token messages (the first token goes at once), read as the reply goes."""
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
                if first or time.perf_counter() - last >= batch_s():
                    first = False
                    flush()
            elif isinstance(event, PromptEvaluated):
                post(PromptShown(reply_id, event))
            elif isinstance(event, PrefillProgress):
                post(PrefillProgressed(reply_id, event.done, event.total, event.elapsed_s))
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
    except Exception as exc:  # the UI must hear about every failure
        flush()
        post(ReplyFailed(reply_id, f"unexpected error: {type(exc).__name__}: {exc}"))
