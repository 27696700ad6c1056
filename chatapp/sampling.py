"""Sampler settings: one frozen dataclass with bounds and steps per field, and presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from chatapp.errors import ChatappError


@dataclass(frozen=True)
class Bound:
    """The allowed range and slider step of one sampler field."""

    low: float
    high: float
    step: float
    help: str


BOUNDS: dict[str, Bound] = {
    "temperature": Bound(0.0, 2.0, 0.05, "0 = greedy; higher = more random"),
    "top_k": Bound(0, 200, 1, "keep the k most likely tokens; 0 = off"),
    "top_p": Bound(0.0, 1.0, 0.01, "keep the smallest set whose probability reaches p; 1 = off"),
    "min_p": Bound(0.0, 1.0, 0.01, "drop tokens below min_p x the top probability; 0 = off"),
    "repeat_penalty": Bound(1.0, 2.0, 0.01, "divide logits of recent tokens; 1 = off"),
    "max_tokens": Bound(1, 32768, 16, "most tokens in one reply"),
    "seed": Bound(0, 2**31 - 1, 1, "random seed of the sampler"),
}

INT_FIELDS = {"top_k", "max_tokens", "seed", "repeat_last_n"}


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
        if self.repeat_last_n < 0:
            raise SettingsError(f"repeat_last_n must be 0 or more, got {self.repeat_last_n}")

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
