"""One benchmark run's speeds, whoever ran it (the engine, llama-bench, llama-server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


def turns(names: list[str], reps: int) -> Iterator[tuple[int, list[str]]]:
    """Each round's order of the arms `names`, turning one place each round, so a drift in the
    machine's speed falls on every arm alike: (rep, order) for `reps` rounds."""
    for rep in range(reps):
        turn = rep % len(names)
        yield rep, names[turn:] + names[:turn]


def interleaved(arms: dict[str, Callable[[int], T]], reps: int) -> dict[str, list[T]]:
    """Each arm once a round for `reps` rounds, in turns(); arm(rep) measures repetition rep."""
    out: dict[str, list[T]] = {name: [] for name in arms}
    for rep, order in turns(list(arms), reps):
        for name in order:
            out[name].append(arms[name](rep))
    return out
