"""One benchmark run's speeds, whoever ran it (the engine, llama-bench, llama-server)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Run:
    """Prefill and decode speeds of one run, and its generated tokens."""

    prefill_tps: float
    decode_tps: float
    tokens: int
    crashed: str = ""  # the signal that killed a llama-bench run ("" = it ran)
