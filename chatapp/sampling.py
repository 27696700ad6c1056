"""Sampler settings: one table row per sampler (bounds, label, llama.cpp step, kept rule, server
name) that the engine, the panels and the CLI read; the frozen settings dataclass; presets."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, fields, replace
from math import log
from typing import Any, NamedTuple

from chatapp.errors import ChatappError


@dataclass(frozen=True)
class Bound:
    """The allowed range and slider step of one sampler field."""

    low: float
    high: float
    step: float
    help: str


VOCAB = "n_vocab"
"""Stands for the model's vocabulary size among a native step's arguments."""


class Native(NamedTuple):
    """One step of llama.cpp's sampler chain: a llama_sampler_init_* function and its
    arguments (VOCAB where the vocabulary size goes); the engine makes it."""

    init: str
    args: tuple = ()


Kept = Callable[[Any, Any], Any]
"""A step's kept rule: (column, value) -> a bool mask over the column, True for the candidates
the step keeps. The column (engine/candidate_rows.Column) holds the candidates that reach the
step, best first, as numpy arrays: `logit` (after the penalties), `p` (their probabilities
among themselves), `log_p`, `mass_before` (the probability of those ranked above), `rank`
(0, 1, ...); a rule uses their operators and methods only."""


@dataclass(frozen=True)
class Sampler:
    """One SamplerSettings field and what each part of chatapp does with it.

    `native`: the llama.cpp steps it adds to the chain for given settings (none: off, not a
    chain step, or read by another row's step); the rows with steps come in chain order.
    `kept`: which candidates its step keeps (engine/candidate_rows applies the rules in chain
    order: which step cut each candidate, the probabilities after the samplers). `server`: its
    key in an OpenAI-compatible request body (None: not sent), `server_kinds` the servers that
    take it (empty: all). `slider`: its place among the sliders (None: none), `slider_high`
    the top of a slider over a huge range. `cli`: an option of `chatapp ask`.
    """

    name: str
    bound: Bound
    label: str
    native: Callable[[SamplerSettings], tuple[Native, ...]] | None = None
    kept: Kept | None = None
    server: str | None = None
    server_kinds: tuple[str, ...] = ()
    slider: int | None = None
    slider_high: float | None = None
    cli: bool = True
    whole: bool = False  # a whole number
    cut_name: str = ""  # its cut's name in the panel, where not its label and value

    def steps(self, s: SamplerSettings) -> tuple[Native, ...]:
        """Its native steps for these settings (empty when it adds none)."""
        return self.native(s) if self.native is not None else ()

    def cut_text(self, s: SamplerSettings) -> str:
        """The Next token panel's name for this step's cut: 'top-k 40', 'greedy'."""
        return self.cut_name or f"{self.label} {getattr(s, self.name):g}"


def _step(init: str, *args: Any) -> tuple[Native, ...]:
    return (Native(init, args),)


def _filter(on: bool, s: SamplerSettings, init: str, *args: Any) -> tuple[Native, ...]:
    """A filter's step where it is on (min_keep 1); none when greedy (the chain is then the
    penalties and greedy alone)."""
    return _step(init, *args) if on and not s.greedy else ()


def _penalties(s: SamplerSettings) -> tuple[Native, ...]:
    if s.repeat_penalty == 1.0 or s.repeat_last_n <= 0:
        return ()
    return _step("llama_sampler_init_penalties", VOCAB, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0)


def _temperature(s: SamplerSettings) -> tuple[Native, ...]:
    if s.greedy:
        return _step("llama_sampler_init_greedy")
    return _step("llama_sampler_init_temp", s.temperature)


def _best(c: Any) -> Any:
    return c.rank < 1  # (min_keep 1: a filter always keeps the best)


SAMPLERS: tuple[Sampler, ...] = (
    Sampler(
        "repeat_penalty",
        Bound(1.0, 2.0, 0.01, "divide logits of recent tokens; 1 = off"),
        "repeat",
        native=_penalties,
        server="repeat_penalty",
        slider=4,
    ),
    Sampler(
        "top_k",
        Bound(0, 200, 1, "keep the k most likely tokens; 0 = off"),
        "top-k",
        native=lambda s: _filter(s.top_k > 0, s, "llama_sampler_init_top_k", s.top_k),
        kept=lambda c, k: c.rank < k,
        server="top_k",
        slider=2,
        whole=True,
    ),
    Sampler(
        "top_p",
        Bound(0.0, 1.0, 0.01, "keep the smallest set whose probability reaches p; 1 = off"),
        "top-p",
        native=lambda s: _filter(s.top_p < 1.0, s, "llama_sampler_init_top_p", s.top_p, 1),
        kept=lambda c, p: (c.mass_before < p) | _best(c),
        server="top_p",
        slider=1,
    ),
    Sampler(
        "min_p",
        Bound(0.0, 1.0, 0.01, "drop tokens below min_p x the top probability; 0 = off"),
        "min-p",
        native=lambda s: _filter(s.min_p > 0.0, s, "llama_sampler_init_min_p", s.min_p, 1),
        kept=lambda c, m: (c.logit >= c.logit[0] + log(m)) | _best(c),
        server="min_p",
        slider=3,
    ),
    Sampler(
        "temperature",
        Bound(0.0, 2.0, 0.05, "0 = greedy; higher = more random"),
        "temp",
        native=_temperature,
        kept=lambda c, t: _best(c) if t <= 0.0 else c.rank >= 0,
        cut_name="greedy",  # (the only cut it makes)
        server="temperature",
        slider=0,
    ),
    Sampler(
        "seed",
        Bound(0, 2**31 - 1, 1, "random seed of the sampler"),
        "seed",
        native=lambda s: () if s.greedy else _step("llama_sampler_init_dist", s.seed),
        server="seed",
        slider=6,
        slider_high=1000,
        whole=True,
    ),
    Sampler(
        "max_tokens",
        Bound(1, 32768, 16, "most tokens in one reply"),
        "max tok",
        server="max_tokens",
        slider=5,
        slider_high=4096,
        whole=True,
    ),
    Sampler(
        "repeat_last_n",
        Bound(0, 2**31 - 1, 1, "how many recent tokens the repeat penalty looks at"),
        "window",
        server="repeat_last_n",
        server_kinds=("llama-server",),
        cli=False,
        whole=True,
    ),
)
"""Every sampler setting, the native chain's steps in chain order (the penalties, then the
filters on what is left, then temperature or greedy, then the random pick)."""

BY_NAME: dict[str, Sampler] = {row.name: row for row in SAMPLERS}
BOUNDS: dict[str, Bound] = {row.name: row.bound for row in SAMPLERS}
INT_FIELDS = frozenset(row.name for row in SAMPLERS if row.whole)
SLIDERS: tuple[Sampler, ...] = tuple(
    sorted((r for r in SAMPLERS if r.slider is not None), key=lambda r: r.slider or 0)
)
CUTS: tuple[Sampler, ...] = tuple(r for r in SAMPLERS if r.kept is not None)
"""The rows whose steps can cut a candidate, in chain order."""


def native_chain(s: SamplerSettings) -> tuple[Native, ...]:
    """llama.cpp's sampler chain for these settings, step by step."""
    return tuple(step for row in SAMPLERS for step in row.steps(s))


def repeat_penalized(logits: Any, rp: float) -> Any:
    """llama.cpp's repetition penalty on the logits of the tokens in its window (a numpy
    array): a positive logit divided by rp, any other multiplied by it (both lower it)."""
    return (logits > 0).choose(logits * rp, logits / rp)


def by_name(s: SamplerSettings, leave_out: Collection[str] = ()) -> dict[str, Any]:
    """The settings by the table's names, as keyword arguments of an API that names them as
    SamplerSettings does (llama-cpp-python's create_completion), `leave_out` left out."""
    return {row.name: getattr(s, row.name) for row in SAMPLERS if row.name not in leave_out}


def server_fields(s: SamplerSettings, kind: str, leave_out: Collection[str] = ()) -> dict[str, Any]:
    """The settings by the table's server names, those the server `kind` takes (a request's
    body), the rows named in `leave_out` left out."""
    return {
        row.server: getattr(s, row.name)
        for row in SAMPLERS
        if row.server is not None
        and (not row.server_kinds or kind in row.server_kinds)
        and row.name not in leave_out
    }


class SettingsError(ChatappError):
    """A sampler value outside its allowed range."""


@dataclass(frozen=True)
class SamplerSettings:
    """How the next token is picked. Frozen: a change makes a new object."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 512
    seed: int = 42
    repeat_last_n: int = 64

    def __post_init__(self) -> None:
        for name, bound in BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SettingsError(f"{name} must be a number, got {value!r}")
            if value != value or not bound.low <= value <= bound.high:
                raise SettingsError(
                    f"{name} must be between {_fmt(bound.low)} and {_fmt(bound.high)}, "
                    f"got {_fmt(value)}"
                )
            if name in INT_FIELDS and int(value) != value:
                raise SettingsError(f"{name} must be a whole number, got {value}")

    @property
    def greedy(self) -> bool:
        """True when the reply is picked greedily (temperature 0)."""
        return self.temperature <= 0.0

    def with_(self, **changes: Any) -> SamplerSettings:
        """A copy with some fields changed (validated)."""
        return replace(self, **{k: _coerce(k, v) for k, v in changes.items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerSettings:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            allowed = ", ".join(sorted(known))
            first = sorted(unknown)[0]
            raise SettingsError(f"unknown sampler setting {first!r}; allowed: {allowed}")
        return cls(**{k: _coerce(k, v) for k, v in data.items()})


def _coerce(name: str, value: Any) -> Any:
    if name in INT_FIELDS and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


PRESETS: dict[str, SamplerSettings] = {
    "greedy": SamplerSettings(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0),
    "precise": SamplerSettings(temperature=0.3, top_k=20, top_p=0.9, min_p=0.1),
    "balanced": SamplerSettings(),
    "creative": SamplerSettings(temperature=1.2, top_k=100, top_p=0.98, min_p=0.02),
}
