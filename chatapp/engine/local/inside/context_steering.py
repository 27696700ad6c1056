"""Steering in the worker: the control vector on the live context, and the residual-stream reads
that make a vector and meter a text (on the inspector's context, never the reply's).

llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end) sets the vector for every decode
from then on (NULL clears it); llama.cpp rebuilds its graph schedule once after each call, so it
is called only when the steering changes, and never while steering stays off. The KV cache
holds the keys and values computed under the vector in force: a reply with other steering than
the cache was filled with starts from an empty cache (or from where a mid-reply change began).
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

import numpy as np

from chatapp.engine import control_vector
from chatapp.engine.protocol import Notice, SteeringApplied
from chatapp.engine.steer_checks import check_layers
from chatapp.engine.steer_library import check_vector
from chatapp.engine.steering import STEERING_OFF, Steering, SteeringError

if TYPE_CHECKING:
    from chatapp.engine.local.inside.inspector import Inspector
    from chatapp.engine.local.load.loaded_model import LoadedModel

_OFF_KEY: tuple = ()


class ContextSteering:
    """The steering of a LoadedModel's main context."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.w = loaded
        self.n_embd = loaded.lib.llama_model_n_embd(loaded.model)
        self.n_layers = loaded.lib.llama_model_n_layer(loaded.model)
        self.applied: tuple = _OFF_KEY  # the key of the vector set on the context
        self.ctx = loaded.ctx
        self.kv_key: tuple = _OFF_KEY  # the steering the KV cache was filled with
        self.mixed_from: int | None = None  # cache cells from here on: another steering
        self._files: dict[tuple, control_vector.ControlVector] = {}

    def begin(self, steering: Steering | None) -> str:
        """Set a reply's steering before its prompt is read, and keep only the cache made with
        it; returns '' or a sentence saying why it cannot be used."""
        steering = steering if steering is not None and steering.active else STEERING_OFF
        try:
            key = self._apply(steering)
        except SteeringError as exc:
            return str(exc)
        self._keep_cache(key)
        return ""

    def change(self, steering: Steering, index: int) -> SteeringApplied | Notice:
        """Another steering in the middle of a reply, from the next decode on: token index + 1
        is the first computed with it (the one being sampled now was computed before)."""
        before = self.applied
        try:
            key = self._apply(steering if steering.active else STEERING_OFF)
        except SteeringError as exc:
            return Notice(f"the steering was not changed: {exc}")
        if key != before and self.mixed_from is None:
            self.mixed_from = len(self.w.kv_tokens)
        return SteeringApplied(steering, index + 1)

    def _keep_cache(self, key: tuple) -> None:
        w = self.w
        if self.mixed_from is not None and key == self.kv_key:
            w.drop_last(len(w.kv_tokens) - self.mixed_from)
        elif key != self.kv_key or self.mixed_from is not None:
            w.lib.llama_memory_clear(w.mem, True)
            w.kv_tokens = []
        self.kv_key, self.mixed_from = key, None

    def _apply(self, steering: Steering) -> tuple:
        """Put `steering` on the context (nothing when it is there already); its key."""
        w = self.w
        if w.ctx != self.ctx:  # a new context (the tune changed flash attention): no vector
            self.ctx, self.applied = w.ctx, _OFF_KEY
            self.kv_key, self.mixed_from = _OFF_KEY, None
        key, loaded = self._key(steering)
        if key == self.applied:
            return key
        lib = w.lib
        if not key:
            lib.llama_set_adapter_cvec(w.ctx, None, 0, self.n_embd, -1, -1)
        else:
            model = os.path.basename(self.w.options.model_path)
            check_layers(steering.layer_start, steering.layer_end, self.n_layers, model)
            data = control_vector.combined(loaded, self.n_layers)
            start, end = steering.layers(self.n_layers)
            ptr = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            if lib.llama_set_adapter_cvec(w.ctx, ptr, data.size, self.n_embd, start, end) != 0:
                raise SteeringError("llama.cpp refused the control vector (see the worker log)")
        self.applied = key
        return key

    def _key(self, steering: Steering) -> tuple[tuple, list]:
        """What identifies the vector on the context: layers, and each file (as it is on disk)
        with its strength; and the files read."""
        if not steering.active:
            return _OFF_KEY, []
        parts, loaded = [], []
        for v in steering.vectors:
            vector, stamp = self._read(v.name, v.path)
            parts.append((stamp, v.strength))
            loaded.append((vector, v.strength))
        return (steering.layers(self.n_layers), tuple(parts)), loaded

    def _read(self, name: str, path: str) -> tuple[control_vector.ControlVector, tuple]:
        try:
            st = os.stat(path)
        except OSError:
            raise SteeringError(f"the control vector file {path} is gone") from None
        stamp = (path, st.st_mtime_ns, st.st_size)
        vector = self._files.get(stamp)
        if vector is None:
            vector = control_vector.read(path)
            model = os.path.basename(self.w.options.model_path)
            check_vector(vector, name, path, model, self.n_embd, self.n_layers)
            self._files[stamp] = vector
        return vector, stamp


def streams(inspector: Inspector, tokens: list[int]) -> np.ndarray:
    """The residual stream out of blocks 0..n_layers-2 at every token: [layers, tokens, n_embd]
    (the last block's is left out: llama.cpp computes it for the output rows only, and no
    direction is added after it)."""
    from chatapp.engine.local.inside.inspector import InspectorError

    if not tokens:
        raise InspectorError("there are no tokens to read")
    if len(tokens) > inspector.n_ctx:
        raise InspectorError(
            f"the text is {len(tokens)} tokens, the context holds {inspector.n_ctx}"
        )
    inspector._clear()
    reader = inspector.reader
    reader.arm(every_row=True)
    try:
        inspector._decode(tokens)
    finally:
        reader.disarm()
    layers = inspector.n_layers - 1
    out = np.empty(
        (layers, len(tokens), inspector.w.lib.llama_model_n_embd(inspector.w.model)), np.float32
    )
    for il in range(layers):
        parts = reader.streams.get(il)
        rows = np.concatenate(parts) if parts else None
        if rows is None or rows.shape[0] != len(tokens) or rows.shape[1] != out.shape[2]:
            raise InspectorError(f"the residual stream of layer {il + 1} could not be read")
        out[il] = rows
    return out


def text_tokens(w: LoadedModel, text: str) -> tuple[list[int], int]:
    """A text's tokens as a raw prompt is tokenized (with the BOS the model adds), and how many
    lead tokens are not the text's own (that BOS)."""
    tokens = w.tokenize(text, add_bos=w.add_bos)
    lead = 1 if w.add_bos and tokens and tokens[0] == w.bos_id else 0
    return tokens, lead


def residuals(w: LoadedModel, inspector: Inspector, texts: list[str], at: str) -> np.ndarray:
    """Each text's residual stream per layer, [texts, layers, n_embd]: the mean over its tokens
    ("mean") or at its last token ("last"). The first position of a sequence is left out: it
    is the attention sink (the BOS, or the text's first token where the model adds none),
    whose stream is huge and the same whatever the text means."""
    out = []
    for text in texts:
        tokens, _ = text_tokens(w, text)
        if len(tokens) < 2:
            raise SteeringError(f"the example {text[:40]!r} is too short: give a few words")
        rows = streams(inspector, tokens)[:, 1:]
        out.append(rows.mean(axis=1) if at == "mean" else rows[:, -1])
    return np.stack(out)


def meter(w: LoadedModel, inspector: Inspector, text: str, units: np.ndarray):
    """Each token of the text (the model's BOS left out) and its stream's projection on each
    layer's unit direction: (pieces, [tokens, layers], whether the first of them is the
    sequence's first position, the attention sink); NaN where a layer has no direction."""
    tokens, lead = text_tokens(w, text)
    if len(tokens) <= lead:
        raise SteeringError("there is no text to measure")
    rows = streams(inspector, tokens)[:, lead:]
    n = min(rows.shape[0], units.shape[0])
    projections = np.einsum("ltd,ld->tl", rows[:n], np.nan_to_num(units[:n]))
    projections[:, np.isnan(units[:n]).any(axis=1)] = np.nan
    return w.pieces(tokens[lead:]), projections, lead == 0
