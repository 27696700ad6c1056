"""Reading llama.cpp's graph as it runs: the eval callback that copies named tensors.

llama.cpp calls the callback twice per graph node: with ask=True ("do you want this one?")
and, for the nodes answered yes, with ask=False once it is computed. Returning False from the
second call, or raising in either (ctypes then returns 0), silently skips the rest of the graph:
garbage logits, a KV cache never written. So the callback only copies, catches everything,
and always lets the graph go on. It fires once per ubatch: names repeat, the last copy wins.
"""

from __future__ import annotations

import ctypes
import os
import re

import numpy as np

GGML_TYPE_F32 = 0
FAULT_ENV = "CHATAPP_FAULT_INSIDE"
"""Tests: "raise" makes the callback raise once, on the first tensor of the worker's first
capture; "raise:always" on every tensor of every capture. The graph must still run to its end."""

_NAME = re.compile(rb"(l_out|kq_soft_max)-([0-9]+)")


class _TensorHead(ctypes.Structure):
    """The first fields of struct ggml_tensor (stable across ggml versions)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
    ]


def _ggml():
    from llama_cpp import _ggml

    lib = _ggml.libggml  # its dlopen handle also finds libggml-base's symbols
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_backend_tensor_get.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
    ]
    lib.ggml_backend_tensor_get.restype = None
    return lib


class GraphReader:
    """Copies the last row of `l_out-{il}` (the residual stream after layer il) and of
    `kq_soft_max-{il}` (each head's attention probabilities) while `armed`; armed with
    every_row, each ubatch's whole `l_out-{il}` (every token's stream) into `streams`."""

    def __init__(self, n_layers: int) -> None:
        import llama_cpp

        self.n_layers = n_layers
        self.armed = False
        self.residual: dict[int, np.ndarray] = {}
        self.attention: dict[int, np.ndarray] = {}  # [n_head, n_kv]
        self.every_row = False
        self.streams: dict[int, list[np.ndarray]] = {}  # [n_tokens, n_embd] per ubatch
        self.errors: list[str] = []
        self._fault = ""
        self._faults = os.environ.get(FAULT_ENV, "")
        self._lib = _ggml()
        self._name_of = self._lib.ggml_get_name
        # Referenced here for as long as the context lives: llama.cpp keeps the bare pointer.
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_tensor)

    def arm(self, every_row: bool = False) -> None:
        """Copy from the next graph on (the captured token's), forgetting earlier copies;
        every_row: only the residual stream, every token of it, graph after graph."""
        self.residual.clear()
        self.attention.clear()
        self.streams.clear()
        self.every_row = every_row
        self.errors = []
        self._fault, self._faults = self._faults, self._faults if "always" in self._faults else ""
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def _on_tensor(self, tensor: int, ask: bool, _user_data) -> bool:
        if not self.armed:
            return not ask  # not wanted; and a computed node always lets the graph go on
        try:
            match = _NAME.fullmatch(self._name_of(tensor) or b"")
            if ask:
                return match is not None and (not self.every_row or match.group(1) == b"l_out")
            if match is not None:
                self._copy(tensor, match.group(1), int(match.group(2)))
        except Exception as exc:  # never let it reach ctypes: that would cut the graph short
            if len(self.errors) < 8:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            return not ask
        return True

    def _copy(self, tensor: int, kind: bytes, layer: int) -> None:
        if self._fault.startswith("raise"):
            if self._fault != "raise:always":
                self._fault = ""
            raise RuntimeError("fault injected by " + FAULT_ENV)
        head = _TensorHead.from_address(tensor)
        if head.type != GGML_TYPE_F32 or head.nb[0] != 4:
            raise TypeError(f"{kind.decode()}-{layer} is not contiguous float32")
        ne0, ne1, ne2 = head.ne[0], head.ne[1], head.ne[2]
        last_row = (ne1 - 1) * head.nb[1]
        get = self._lib.ggml_backend_tensor_get
        if kind == b"l_out" and self.every_row:
            if head.nb[1] != ne0 * 4:
                raise TypeError(f"l_out-{layer} rows are not contiguous")
            rows = np.empty((ne1, ne0), dtype=np.float32)
            get(tensor, rows.__array_interface__["data"][0], 0, ne1 * ne0 * 4)
            self.streams.setdefault(layer, []).append(rows)
        elif kind == b"l_out":
            row = np.empty(ne0, dtype=np.float32)
            get(tensor, row.__array_interface__["data"][0], last_row, ne0 * 4)
            self.residual[layer] = row
        else:  # kq_soft_max: ne = [n_kv, n_tokens, n_head]
            rows = np.empty((ne2, ne0), dtype=np.float32)
            base = rows.__array_interface__["data"][0]
            for h in range(ne2):
                get(tensor, base + h * ne0 * 4, last_row + h * head.nb[2], ne0 * 4)
            self.attention[layer] = rows
