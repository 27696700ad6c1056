"""One benchmark run's speeds, whoever ran it (the engine, llama-bench, llama-server)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class Run:
    """Prefill and decode speeds of one run, and its generated tokens."""

    prefill_tps: float
    decode_tps: float
    tokens: int
    crashed: str = ""  # the signal that killed a llama-bench run ("" = it ran)


def interleaved(arms: dict[str, Callable[[int], T]], reps: int) -> dict[str, list[T]]:
    """Each arm once a round for `reps` rounds, the order turning each round, so a drift in the
    machine's speed falls on every arm alike; arm(rep) measures repetition rep."""
    names = list(arms)
    out: dict[str, list[T]] = {name: [] for name in names}
    for rep in range(reps):
        turn = rep % len(names)
        for name in names[turn:] + names[:turn]:
            out[name].append(arms[name](rep))
    return out
