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
    SteeringApplied,
    Token,
    fills_the_cpu,
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


class ReplyStream:
    """One reply's run in a worker thread: the engine's events become the messages below, posted
    (never dropped: every token must reach the chat) to whoever started it; never raises.
    `batch_s()` is the time between token messages (the first token goes at once), read as the
    reply goes."""

    @dataclass
    class PromptShown(Message):
        reply_id: int
        event: PromptEvaluated

    @dataclass
    class PrefillProgressed(Message):
        """A long prompt is being read: how far (a newer one replaces an older one)."""

        reply_id: int
        done: int
        total: int
        elapsed_s: float

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ReplyStream.PrefillProgressed)

    @dataclass
    class TokensArrived(Message):
        """A batch of tokens."""

        reply_id: int
        tokens: list[Token]

    @dataclass
    class SettingsTookEffect(Message):
        reply_id: int
        event: SettingsApplied

    @dataclass
    class SteeringTookEffect(Message):
        """New steering (the Steer tab) took effect from token `event.index` of the reply."""

        reply_id: int
        event: SteeringApplied

    @dataclass
    class Noted(Message):
        """The engine's note on the reply (a sampler setting the server ignores...)."""

        message: str

    @dataclass
    class Ended(Message):
        """The reply is over: the engine's account of it."""

        reply_id: int
        event: Finished

    @dataclass
    class Errored(Message):
        """The reply could not go on; what it wrote so far stays."""

        reply_id: int
        message: str
        log_tail: str = ""
        crashed: bool = False

    def __init__(
        self,
        engine,
        request: GenerateRequest,
        reply_id: int,
        post: Callable[[Message], bool],
        batch_s: Callable[[], float] = lambda: SMOOTH.text_s,
    ) -> None:
        self.engine, self.request, self.reply_id = engine, request, reply_id
        self.post, self.batch_s = post, batch_s

    def run(self) -> None:
        reply_id, post, batch_s = self.reply_id, self.post, self.batch_s
        batch: list[Token] = []
        last = 0.0
        first = True

        def flush() -> None:
            nonlocal batch, last
            if batch:
                post(self.TokensArrived(reply_id, batch))
                batch = []
            last = time.perf_counter()

        try:
            for event in self.engine.generate(self.request):
                if isinstance(event, Token):
                    batch.append(event)
                    if first or time.perf_counter() - last >= batch_s():
                        first = False
                        flush()
                elif isinstance(event, PromptEvaluated):
                    post(self.PromptShown(reply_id, event))
                elif isinstance(event, PrefillProgress):
                    post(self.PrefillProgressed(reply_id, event.done, event.total, event.elapsed_s))
                elif isinstance(event, SettingsApplied):
                    flush()
                    post(self.SettingsTookEffect(reply_id, event))
                elif isinstance(event, SteeringApplied):
                    flush()
                    post(self.SteeringTookEffect(reply_id, event))
                elif isinstance(event, Notice):
                    post(self.Noted(event.message))
                elif isinstance(event, Finished):
                    flush()
                    post(self.Ended(reply_id, event))
                    return
                elif isinstance(event, Failed):
                    flush()
                    post(self.Errored(reply_id, event.message))
                    return
            flush()
            post(self.Errored(reply_id, "the reply ended without a finish event"))
        except EngineCrashed as exc:
            flush()
            post(self.Errored(reply_id, str(exc), exc.log_tail, crashed=True))
        except EngineError as exc:
            flush()
            post(self.Errored(reply_id, str(exc)))
        except Exception as exc:  # the UI must hear about every failure
            flush()
            post(self.Errored(reply_id, f"unexpected error: {type(exc).__name__}: {exc}"))
