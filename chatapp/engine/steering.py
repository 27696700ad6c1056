"""Steering with control vectors: what a request asks for (plain, picklable data) and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chatapp.engine.engine_errors import EngineError
from chatapp.engine.token_piece import TokenPiece

REMOTE_NOTE = (
    "steering needs a local model: a server applies no control vectors to its layers, so load "
    "a GGUF file locally to steer it"
)


class SteeringError(EngineError):
    """A control vector that cannot be used: a bad file, a wrong width, an unknown name, a bad
    NAME:STRENGTH; str() is one sentence saying what to do."""


class SteeringUnavailable(SteeringError):
    """This engine cannot steer (a remote server)."""


@dataclass(frozen=True)
class SteerVector:
    """One control vector in use: its name, its GGUF file and how hard it pushes."""

    name: str
    path: str
    strength: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "strength": self.strength}


@dataclass(frozen=True)
class Steering:
    """The control vectors added to the residual stream, each times its strength, after each
    layer of `layers` (llama.cpp's --control-vector-layer-range: both ends inclusive, counted
    from 1; 0 = its default, layer 1 to the last)."""

    vectors: tuple[SteerVector, ...] = ()
    layer_start: int = 0
    layer_end: int = 0
    changes: tuple[tuple[int, tuple[SteerVector, ...]], ...] = field(default=(), compare=False)
    """Mid-reply changes as history records them: (first token computed with them, vectors)."""

    @property
    def active(self) -> bool:
        """Whether anything is added at all (every strength 0 is the same as none)."""
        return any(v.strength != 0 for v in self.vectors)

    def layers(self, n_layers: int) -> tuple[int, int]:
        """The range llama.cpp is given for a model of n_layers blocks, as its CLI resolves it."""
        return (self.layer_start or 1, self.layer_end or n_layers)

    def with_strength(self, name: str, strength: float) -> Steering:
        """The same vectors, the one called `name` at another strength (a slider moved)."""
        from chatapp.engine.steer_checks import check_strength  # (it imports SteeringError)

        check_strength(strength, name)
        if all(v.name != name for v in self.vectors):
            raise SteeringError(f"no vector named {name!r} is in use; add it first")
        moved = (replace(v, strength=strength) if v.name == name else v for v in self.vectors)
        return replace(self, vectors=tuple(moved))

    def to_dict(self) -> dict[str, Any]:
        """As `ask --json` and the history keep it."""
        data: dict[str, Any] = {
            "vectors": [v.to_dict() for v in self.vectors],
            "layers": [self.layer_start, self.layer_end],
        }
        if self.changes:
            data["changes"] = [
                {"from_token": index, "vectors": [v.to_dict() for v in vectors]}
                for index, vectors in self.changes
            ]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Steering:
        """The inverse of to_dict; raises SteeringError on data it cannot read."""
        try:
            start, end = data.get("layers") or (0, 0)
            changes = tuple(
                (int(c["from_token"]), _vectors(c["vectors"])) for c in data.get("changes") or ()
            )
            return cls(_vectors(data.get("vectors") or ()), int(start), int(end), changes)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SteeringError(f"unreadable steering record ({exc})") from exc


STEERING_OFF = Steering()


@dataclass(frozen=True, eq=False)
class Meter:
    """The concept meter of a text: its tokens, and each one's residual stream projected on the
    vector's unit direction, [tokens, layers] (column N-1: direction.N, measured on the stream
    out of block N-1; NaN where the file has no direction). `sink`: the first token is the
    sequence's first position (the model adds no BOS), the attention sink, whose stream is huge
    whatever the text says: left out of the means."""

    tokens: tuple[TokenPiece, ...]
    projections: np.ndarray
    sink: bool = False

    def mean(self, layers: range | None = None) -> float:
        """The mean projection over the tokens (the sink left out) and `layers` (from 1; None:
        all measured)."""
        rows = self.projections[1:] if self.sink else self.projections
        cols = rows if layers is None else rows[:, [n - 1 for n in layers]]
        return float(np.nanmean(cols)) if cols.size else float("nan")

    @property
    def middle_layer(self) -> int:
        """The layer shown when none is chosen: the middle one, where concepts tend to be
        clearest."""
        return (self.projections.shape[1] + 1) // 2


def _vectors(items) -> tuple[SteerVector, ...]:
    return tuple(SteerVector(str(v["name"]), str(v["path"]), float(v["strength"])) for v in items)
