"""The concept meter on the reply: each shown token's projection matched to the metered text's
tokens, as colours for the token strip and a per-layer curve for the Inside tab."""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np
from rich.text import Text

from chatapp.engine.steering import Meter
from chatapp.textsafe import token_display

SPARKS = "▁▂▃▄▅▆▇█"


def reply_text(pieces: list[bytes]) -> str:
    """The text the meter reads: the reply's tokens put together."""
    return b"".join(pieces).decode("utf-8", errors="replace")


def match_rows(pieces: list[bytes], found: Meter) -> list[int | None]:
    """For each token shown, the metered token holding its first byte (the meter cuts the
    text again; where the cuts agree, one to one). None past the metered text."""
    starts, at = [], 0
    for tok in found.tokens:
        starts.append(at)
        at += len(tok.piece)
    total = at
    rows: list[int | None] = []
    at = 0
    for piece in pieces:
        j = bisect_right(starts, at) - 1
        rows.append(j if 0 <= j and at < total else None)
        at += len(piece)
    return rows


def values_at(found: Meter, rows: list[int | None], layer: int) -> np.ndarray:
    """Each shown token's projection at `layer` (from 1); NaN for the attention sink (its
    stream is huge whatever it says) and for tokens the meter has no row for."""
    column = found.projections[:, layer - 1].astype(np.float64)
    if found.sink and column.size:
        column[0] = np.nan
    return np.array([column[j] if j is not None else np.nan for j in rows], dtype=np.float64)


def shares(values: np.ndarray) -> tuple[float, ...]:
    """-1..1 per token: how far above (or below) the reply's median it lies, as a share of the
    farthest one. A projection has an offset of its own at each layer: only the differences
    between the reply's tokens mean something."""
    if not np.isfinite(values).any():
        return tuple(float("nan") for _ in values)
    centre = float(np.nanmedian(values))
    scale = float(np.nanmax(np.abs(values - centre))) or 1.0
    return tuple(float((v - centre) / scale) for v in values)


def layer_means(found: Meter) -> list[float]:
    """The mean over the reply's tokens (the sink left out) at each layer."""
    return [found.mean(range(n, n + 1)) for n in range(1, found.projections.shape[1] + 1)]


def sparkline(values: list[float], low: float, high: float) -> str:
    span = (high - low) or 1.0
    out = []
    for v in values:
        if math.isnan(v):
            out.append(" ")
        else:
            out.append(SPARKS[min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))])
    return "".join(out)


def curve(found: Meter, row: int, name: str, muted: str = "dim") -> Text:
    """The selected token's projection layer by layer beside the reply's mean, on one scale,
    and the layer where it stands farthest above (or below) the rest of the reply."""
    mine = [float(x) for x in found.projections[row]]
    means = layer_means(found)
    both = [v for v in mine + means if not math.isnan(v)]
    piece = token_display(found.tokens[row].piece)
    out = Text()
    out.append(f"Concept meter: {name!r} at each layer for {piece!r} ", muted)
    out.append(f"(layers 1-{len(mine)}, one scale)\n", muted)
    if not both:
        out.append("no projections: the vector has no direction at these layers\n", muted)
        return out
    low, high = min(both), max(both)
    out.append("token ")
    out.append(sparkline(mine, low, high))
    out.append(f"  {low:.1f}..{high:.1f}\n")
    out.append("reply ")
    out.append(sparkline(means, low, high) + "\n")
    if row == 0 and found.sink:
        out.append(
            "the first token is the attention sink: its stream is huge whatever it says\n", muted
        )
        return out
    diffs = [a - b for a, b in zip(mine, means, strict=True)]
    best = max(
        range(len(diffs)), key=lambda i: -math.inf if math.isnan(diffs[i]) else abs(diffs[i])
    )
    if not math.isnan(diffs[best]):
        side = "above" if diffs[best] > 0 else "below"
        out.append(
            f"farthest {side} the reply's mean at layer {best + 1} ({diffs[best]:+.1f})\n", muted
        )
    return out
