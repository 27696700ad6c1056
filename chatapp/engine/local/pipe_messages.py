"""What the parent and its model worker say over their two pipes: one frozen type per message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np

    from chatapp.engine.inspection import InspectRequest
    from chatapp.engine.local.loop.perplexity_scoring import PerplexityJob
    from chatapp.engine.protocol import Event, GenerateRequest, ModelInfo
    from chatapp.engine.steering import Steering
    from chatapp.sampling import SamplerSettings

# ---- the main pipe, parent to worker: a request (one at a time) or a word about the one on --


@dataclass(frozen=True, slots=True)
class Generate:
    """Write a reply. `sent_at` (perf_counter, one clock for both processes): how long it
    waited behind a step of the tune on first use."""

    request: GenerateRequest
    sent_at: float


@dataclass(frozen=True, slots=True)
class Score:
    """Log-probabilities of each next token of a text; answered by Scored."""

    tokens: list[int]


@dataclass(frozen=True, slots=True)
class Perplexity:
    """Score a text in chunks; answered by PerplexityProgress..., then PerplexityDone."""

    job: PerplexityJob


@dataclass(frozen=True, slots=True)
class StartAutotune:
    """Begin the tune on first use (LocalEngine.start_autotune); mid-reply, once it ends."""

    plan: dict


@dataclass(frozen=True, slots=True)
class NewSettings:
    """Sampler settings for the rest of the reply in progress (stale between replies)."""

    settings: SamplerSettings


@dataclass(frozen=True, slots=True)
class NewSteering:
    """Steering for the rest of the reply in progress (stale between replies)."""

    steering: Steering


@dataclass(frozen=True, slots=True)
class Cancel:
    """End the reply in progress (stale between replies)."""


@dataclass(frozen=True, slots=True)
class Close:
    """End the worker (mid-reply: the reply ends first)."""


Request = Generate | Score | Perplexity
Command = Request | StartAutotune | NewSettings | NewSteering | Cancel | Close

# ---- the main pipe, worker to parent --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WarmingUp:
    """The model is loaded; its first decode runs (a crash now is the backend's)."""


@dataclass(frozen=True, slots=True)
class LoadFailed:
    """The load failed: one sentence naming the file and why. The worker then ends."""

    reason: str


@dataclass(frozen=True, slots=True)
class Loaded:
    """The model is ready: its facts."""

    info: ModelInfo


@dataclass(frozen=True, slots=True)
class Events:
    """A reply's events since the last batch (reply_loop.py sends them every 50-100 ms)."""

    events: list[Event]


@dataclass(frozen=True, slots=True)
class Scored:
    """Score's answer: the log-probabilities, or a sentence saying why not."""

    result: np.ndarray | str


@dataclass(frozen=True, slots=True)
class PerplexityProgress:
    """A chunk of a Perplexity scored: tokens scored so far, of all, seconds so far."""

    done: int
    total: int
    seconds: float


@dataclass(frozen=True, slots=True)
class PerplexityDone:
    """Perplexity's answer: the results, or a sentence saying why not."""

    result: dict | str


Reply = WarmingUp | LoadFailed | Loaded | Events | Scored | PerplexityProgress | PerplexityDone

# ---- the side pipe: one request, one answer (SideFailure when it raised) --------------------


@dataclass(frozen=True, slots=True)
class Tokenize:
    """Tokens of a text, as TokenPieces."""

    what: ClassVar[str] = "tokenize"  # (how a failure names it)
    text: str
    special: bool


@dataclass(frozen=True, slots=True)
class RenderPrompt:
    """A request's templated prompt, and a warning if a fallback was used."""

    what: ClassVar[str] = "template"
    request: GenerateRequest


@dataclass(frozen=True, slots=True)
class AutotuneStatus:
    """The tune on first use's progress, or None when none ran."""

    what: ClassVar[str] = "autotune_status"


@dataclass(frozen=True, slots=True)
class Inspect:
    """One capture inside the model, or a sentence saying why not."""

    what: ClassVar[str] = "inspect"
    request: InspectRequest


@dataclass(frozen=True, slots=True)
class SteerResiduals:
    """Each text's residual stream by layer ("mean" over its tokens or at the "last")."""

    what: ClassVar[str] = "steer_residuals"
    texts: tuple[str, ...]
    at: str


@dataclass(frozen=True, slots=True)
class SteerMeter:
    """A text's tokens and their streams' projections on each layer's unit direction."""

    what: ClassVar[str] = "steer_meter"
    text: str
    units: np.ndarray


SideRequest = Tokenize | RenderPrompt | AutotuneStatus | Inspect | SteerResiduals | SteerMeter


@dataclass(frozen=True, slots=True)
class SideFailure:
    """The answer to a request that failed in the worker: the parent raises it as an error."""

    message: str


def side_label(msg: Any) -> str:
    """How a sentence names a side request: its `what`; for anything else (a request this
    worker does not know) its first item or its type's name."""
    what = getattr(msg, "what", None)
    if isinstance(what, str):
        return what
    if isinstance(msg, tuple) and msg:
        return str(msg[0])
    return type(msg).__name__
