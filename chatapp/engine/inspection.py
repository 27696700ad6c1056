"""Inside the model: what a capture of one token's forward pass reports (plain, picklable data).

A capture looks at one position of a token sequence: the residual stream after each layer read
through the model's own final norm and output matrix (the *logit lens*), the attention
probabilities of that position over the earlier ones, and the nearest tokens to the chosen
token in the embedding space. engine/local/inside/inspector.py makes them in the worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chatapp.engine.engine_errors import EngineError
from chatapp.engine.request import GenerateRequest

REMOTE_NOTE = (
    "a server only sends its tokens and probabilities, so it has no view of the model's layers, "
    "attention or embeddings; load a GGUF file locally to look inside"
)


class InsideUnavailable(EngineError):
    """This engine cannot look inside its model (a remote server)."""


@dataclass(frozen=True)
class InspectRequest:
    """One capture: the forward pass of `tokens[position]` (the prediction of the next token).

    Give `tokens` (exact ids, e.g. a conversation so far), or `prompt` (a request rendered and
    tokenized as a reply's prompt is: chat template, or raw_prompt as plain text) to look at
    the token after the prompt."""

    tokens: tuple[int, ...] = ()
    prompt: GenerateRequest | None = None
    position: int = -1
    """Which token's pass to capture; negative counts from the end (-1: the last)."""
    chosen: int | None = None
    """The token whose rank each layer reports (None: the model's own top token there)."""
    top: int = 3  # tokens listed per layer
    neighbours: int = 10  # nearest tokens to the chosen one by cosine


@dataclass(frozen=True)
class Ranked:
    """A token and its probability under one layer's lens."""

    id: int
    piece: bytes
    p: float

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class LayerLens:
    """What one depth would predict: index 0 is the embedding, 1..N the layers, N+1 the model's
    own output (its real logits, not a lens)."""

    layer: int
    name: str  # "embedding", "layer 7", "final"
    top: tuple[Ranked, ...]
    chosen_rank: int  # 1 = this depth's top token
    chosen_p: float


@dataclass(frozen=True)
class Neighbour:
    """A token near another in the embedding matrix."""

    id: int
    piece: bytes
    cosine: float

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", errors="replace")


@dataclass(frozen=True, eq=False)
class Inspection:
    """One capture's result (see InspectRequest)."""

    position: int  # of the captured token, from 0
    tokens: tuple[int, ...]  # the sequence up to and including that position
    pieces: tuple[bytes, ...]  # each token's bytes
    chosen: Ranked  # the token explained: the model's top token, or the request's `chosen`
    layers: tuple[LayerLens, ...]  # embedding, 1..N, final
    attention: np.ndarray
    """float32 [n_layers, n_head, position + 1]: each head's attention probabilities of the
    captured token over positions 0..position (a layer that could not be read is NaN)."""
    neighbours: tuple[Neighbour, ...]
    n_head_kv: int  # query head h reads KV head h // (n_head // n_head_kv)
    lens_ok: bool
    lens_note: str = ""
    """Why the layers are not shown when lens_ok is False (one sentence)."""
    notes: tuple[str, ...] = ()  # other caveats of this capture (a layer not read)
    timings: dict = field(default_factory=dict)
    """Milliseconds: setup (context and weights, first capture only), prefill, capture (the
    captured token's pass), lens, total; and prefilled (tokens evaluated now)."""

    @property
    def n_layers(self) -> int:
        return int(self.attention.shape[0])

    @property
    def n_head(self) -> int:
        return int(self.attention.shape[1])

    def mean_attention(self, layer: int | None = None, head: int | None = None) -> np.ndarray:
        """Attention over positions averaged over heads: of one layer (1..N), or of all; of one
        query head (0..n_head-1) alone, or the mean over all of them."""
        att = self.attention if layer is None else self.attention[layer - 1 : layer]
        if head is not None:
            att = att[:, head : head + 1]
        return np.nanmean(att, axis=(0, 1))

    def kv_head(self, head: int) -> int:
        """The KV head a query head reads (grouped-query attention)."""
        group = max(self.n_head // max(self.n_head_kv, 1), 1)
        return head // group
