"""The inspector: a second context on the loaded model that captures one token's forward pass.

Made lazily (the first capture) on the same llama_model, so the weights are shared and the
main context, its KV cache and the token loop are never touched: decoding pays nothing. Flash
attention is off in it (only then does llama.cpp's graph hold the attention probabilities,
`kq_soft_max-{il}`), its ubatch is small (without flash attention the score matrix is
n_kv x n_ubatch x n_head floats) and the graph callback (graph_reader.py) is set on it alone.
It keeps its own KV cache between captures and re-evaluates only what differs from the last
sequence, so looking at the tokens of one conversation one after another costs one token's pass
each; the first capture pays the prefill, the context and reading the weights from the file.
"""

from __future__ import annotations

import time

import numpy as np

from chatapp.engine.inspection import Inspection, LayerLens, Neighbour, Ranked
from chatapp.engine.local.inside.graph_reader import GraphReader
from chatapp.engine.local.inside.lens_weights import LensWeights
from chatapp.engine.local.load.llama_open import fill_batch

SCORES_BUDGET = 64 << 20  # bytes for the score matrix of one ubatch
LENS_NOTE = (
    "the last layer read through the model's final norm and output matrix does not give the "
    "model's own top token (it has another final norm or transform this lens does not copy), "
    "so what each layer would predict is not shown"
)


class InspectorError(Exception):
    """A capture could not be made; str() is a sentence."""


def ubatch_for(n_ctx: int, n_head: int) -> int:
    """The largest power of two <= 512 whose score matrix fits SCORES_BUDGET (at least 8).
    The captured token is evaluated alone; the ubatch sets the speed of the prefill before."""
    ub = 512
    while ub > 8 and n_ctx * ub * n_head * 4 > SCORES_BUDGET:
        ub //= 2
    return ub


class Inspector:
    """Captures for the model `loaded` (a LoadedModel); one capture at a time."""

    def __init__(self, loaded) -> None:
        t0 = time.perf_counter()
        lib = self.lib = loaded.lib
        self.w = loaded
        self.n_layers = lib.llama_model_n_layer(loaded.model)
        self.n_head = lib.llama_model_n_head(loaded.model)
        self.n_head_kv = lib.llama_model_n_head_kv(loaded.model)
        self.n_ctx = loaded.n_ctx
        self.reader = GraphReader(self.n_layers)
        self.n_batch = ubatch_for(self.n_ctx, self.n_head)
        params = lib.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = loaded.options.threads
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.swa_full = True  # sliding-window layers keep every cell: cell i is position i
        params.cb_eval = self.reader.callback
        params.cb_eval_user_data = None
        params.no_perf = True
        self.ctx = lib.llama_init_from_model(loaded.model, params)
        if not self.ctx:
            raise InspectorError("llama.cpp could not make a second context to look inside")
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.kv_tokens: list[int] = []
        self.weights = LensWeights(loaded.options.model_path, loaded.n_vocab)
        self.setup_ms = (time.perf_counter() - t0) * 1000
        self._setup_reported = False

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.ctx = None

    # ---- the KV cache -------------------------------------------------------------------

    def _keep_prefix(self, seq: list[int]) -> int:
        """Keep the cached cells shared with seq, all but its last token; returns how many."""
        n = 0
        limit = min(len(self.kv_tokens), len(seq) - 1)
        while n < limit and self.kv_tokens[n] == seq[n]:
            n += 1
        if n < len(self.kv_tokens) and not self.lib.llama_memory_seq_rm(self.mem, -1, n, -1):
            n = 0
        if n == 0:
            self._clear()
        del self.kv_tokens[n:]
        return n

    def _clear(self) -> None:
        self.lib.llama_memory_clear(self.mem, True)
        self.kv_tokens = []

    def _decode(self, tokens: list[int]) -> None:
        b = self.batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            fill_batch(b, chunk, len(self.kv_tokens))
            code = self.lib.llama_decode(self.ctx, b)
            if code != 0:
                self._clear()
                raise InspectorError(f"llama.cpp could not evaluate the tokens (code {code})")
            self.kv_tokens.extend(chunk)

    # ---- a capture ----------------------------------------------------------------------

    def capture(
        self,
        tokens: list[int],
        position: int = -1,
        chosen: int | None = None,
        top: int = 3,
        n_neighbours: int = 10,
    ) -> Inspection:
        """The forward pass of tokens[position]: lens, attention, the chosen token's
        neighbours. Raises InspectorError with a sentence."""
        if position < 0:
            position += len(tokens)
        if not 0 <= position < len(tokens):
            raise InspectorError(f"there is no token at position {position}")
        if position >= self.n_ctx:
            raise InspectorError(f"position {position} is past the context ({self.n_ctx} tokens)")
        seq = [int(t) for t in tokens[: position + 1]]
        t0 = time.perf_counter()
        attention = None
        for attempt in (0, 1):
            if attempt == 0:
                keep = self._keep_prefix(seq)
            else:
                self._clear()
                keep = 0
            self._decode(seq[keep:-1])
            t1 = time.perf_counter()
            self.reader.arm()
            try:
                self._decode(seq[-1:])
            finally:
                self.reader.disarm()
            t2 = time.perf_counter()
            attention, att_notes, misplaced = self._attention(position)
            if not misplaced or keep == 0:
                break  # cells out of order (a reused cache): evaluate afresh, once
        logits = np.ctypeslib.as_array(
            self.lib.llama_get_logits_ith(self.ctx, -1), shape=(self.w.n_vocab,)
        ).copy()
        inspection = self._result(seq, logits, attention, chosen, top, n_neighbours)
        t3 = time.perf_counter()
        notes = att_notes + inspection.pop("notes")
        notes += [f"the graph callback failed: {e}" for e in self.reader.errors[:2]]
        timings = {
            "prefilled": len(seq) - keep,
            "prefill_ms": (t1 - t0) * 1000,
            "capture_ms": (t2 - t1) * 1000,
            "lens_ms": (t3 - t2) * 1000,
            "total_ms": (t3 - t0) * 1000,
        }
        if not self._setup_reported:
            timings["setup_ms"] = self.setup_ms
            self._setup_reported = True
        return Inspection(**inspection, notes=tuple(notes), timings=timings)

    def _attention(self, position: int) -> tuple[np.ndarray, list[str], bool]:
        """[n_layers, n_head, position+1] probabilities (NaN where a layer was not read), notes,
        and whether the cells were not in position order (mass past the token)."""
        out = np.full((self.n_layers, self.n_head, position + 1), np.nan, dtype=np.float32)
        missing, misplaced = [], False
        for il in range(self.n_layers):
            rows = self.reader.attention.get(il)
            if rows is None or rows.shape[1] <= position or rows.shape[0] != self.n_head:
                missing.append(il + 1)
                continue
            if float(np.abs(rows[:, position + 1 :]).sum(axis=1).max(initial=0.0)) > 1e-3:
                misplaced = True
                missing.append(il + 1)
                continue
            out[il] = rows[:, : position + 1]
        notes = [f"attention of layers {_spans(missing)} could not be read"] if missing else []
        return out, notes, misplaced

    def _result(self, seq, logits, attention, chosen, top, n_neighbours) -> dict:
        w, weights = self.w, self.weights
        n = self.n_layers
        notes: list[str] = []
        residuals = [weights.embedding[seq[-1]].astype(np.float32)]
        missing = []
        for il in range(n):
            row = self.reader.residual.get(il)
            if row is None or row.shape[0] != residuals[0].shape[0]:
                missing.append(il + 1)
                row = np.full_like(residuals[0], np.nan)
            residuals.append(row)
        if missing:
            notes.append(f"the residual stream of layers {_spans(missing)} could not be read")
        own_top = int(np.argmax(logits))
        chosen = own_top if chosen is None else int(chosen)
        lens, near = weights.lens(np.stack(residuals), chosen, n_neighbours)
        rows = np.vstack([lens, logits[None, :]])
        layers = _lens_rows(rows, chosen, top, w.piece)
        lens_ok = not np.isnan(rows[n]).any() and int(np.argmax(rows[n])) == own_top
        neighbours = tuple(Neighbour(t, w.piece(t), c) for t, c in near)
        final = layers[-1]
        return dict(
            position=len(seq) - 1,
            tokens=tuple(seq),
            pieces=tuple(w.piece(t) for t in seq),
            chosen=Ranked(chosen, w.piece(chosen), final.chosen_p),
            layers=tuple(layers),
            attention=attention,
            neighbours=neighbours,
            n_head_kv=self.n_head_kv,
            lens_ok=lens_ok,
            lens_note="" if lens_ok else LENS_NOTE,
            notes=notes,
        )


def _lens_rows(rows: np.ndarray, chosen: int, top: int, piece) -> list[LayerLens]:
    """One LayerLens per row of logits: embedding, layer 1..N, final."""
    z = rows - rows.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    out = []
    for i, (row, probs) in enumerate(zip(rows, p, strict=True)):
        name = "embedding" if i == 0 else "final" if i == len(rows) - 1 else f"layer {i}"
        if np.isnan(row).any():
            out.append(LayerLens(i, name, (), 0, float("nan")))
            continue
        best = np.argpartition(-probs, top)[:top]
        best = best[np.argsort(-probs[best])]
        rank = int((row > row[chosen]).sum()) + 1
        ranked = tuple(Ranked(int(t), piece(int(t)), float(probs[t])) for t in best)
        out.append(LayerLens(i, name, ranked, rank, float(probs[chosen])))
    return out


def _spans(numbers: list[int]) -> str:
    """1, 2, 3, 7 -> '1-3, 7'."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)
