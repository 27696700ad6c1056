"""The weights a logit lens and the embedding neighbours need, read once from the GGUF file.

Read from the file with gguf's dequantize, never from llama.cpp's graph tensors (their buffers
may be repacked for the CPU). Kept in memory for later captures: float32 while the matrix is at
most F32_MAX_BYTES (the bundled model's 49152 x 576: 113 MB; a lens over 31 rows then takes
~35 ms here against ~120 ms from float16, whose matmul must convert each chunk), float16 above
(gemma3-270m's 262144 x 640: 335 MB instead of 671 MB).
"""

from __future__ import annotations

import numpy as np

F32_MAX_BYTES = 256 << 20
CHUNK_ROWS = 4096  # rows dequantized (and, for float16, converted) at a time


class LensWeights:
    """The final norm, output matrix and embedding matrix of one model file."""

    def __init__(self, path: str, n_vocab: int) -> None:
        from gguf import GGUFReader

        reader = GGUFReader(path)
        tensors = {t.name: t for t in reader.tensors}
        arch = _field(reader, "general.architecture", "llama")
        self.architecture = arch
        self.layer_norm = "output_norm.bias" in tensors  # LayerNorm (GPT-2, Phi) vs RMSNorm
        eps_key = "layer_norm_epsilon" if self.layer_norm else "layer_norm_rms_epsilon"
        self.eps = float(_field(reader, f"{arch}.attention.{eps_key}", 1e-5))
        self.softcap = float(_field(reader, f"{arch}.final_logit_softcapping", 0.0) or 0.0)
        self.norm_weight = _dense(tensors["output_norm.weight"]).astype(np.float32)
        bias = tensors.get("output_norm.bias")
        self.norm_bias = None if bias is None else _dense(bias).astype(np.float32)
        self.tied = "output.weight" not in tensors
        self.embedding = _matrix(tensors["token_embd.weight"], n_vocab)
        self.output = self.embedding if self.tied else _matrix(tensors["output.weight"], n_vocab)
        self.embedding_norms = _row_norms(self.embedding)
        self.nbytes = self.embedding.nbytes + (0 if self.tied else self.output.nbytes)

    def norm(self, x: np.ndarray) -> np.ndarray:
        """The model's final norm of rows of the residual stream."""
        x = x.astype(np.float32)
        if self.layer_norm:
            x = x - x.mean(axis=-1, keepdims=True)
        y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)
        y = y * self.norm_weight
        return y if self.norm_bias is None else y + self.norm_bias

    def lens(self, residuals: np.ndarray, token: int | None = None, k: int = 10):
        """Logits (float32, rows x n_vocab) each residual row would give if it were the last;
        with `token`, also its k nearest tokens by cosine in the embedding matrix (itself left
        out), in the same pass over the matrix when the output matrix is the embedding."""
        x = self.norm(residuals)
        v = None if token is None else self.embedding[token].astype(np.float32)
        shared = v is not None and self.tied
        rows = np.vstack([x, v[None, :]]) if v is not None and shared else x
        logits = _matmul_t(rows, self.output)
        if shared:
            dots, logits = logits[-1], logits[:-1]
        elif v is not None:
            dots = _matmul_t(v[None, :], self.embedding)[0]
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        if v is None:
            return logits, []
        sims = dots / (self.embedding_norms * (float(np.linalg.norm(v)) or 1.0))
        sims[token] = -np.inf
        k = min(k, len(sims) - 1)
        best = np.argpartition(-sims, k)[:k]
        best = best[np.argsort(-sims[best])]
        return logits, [(int(i), float(sims[i])) for i in best]


def _field(reader, key: str, default):
    found = reader.fields.get(key)
    return default if found is None else found.contents()


def _dense(tensor) -> np.ndarray:
    from gguf.quants import dequantize

    return np.asarray(dequantize(tensor.data, tensor.tensor_type)).reshape(-1)


def _matrix(tensor, n_vocab: int) -> np.ndarray:
    """A [rows, n_embd] weight dequantized chunk by chunk (no float32 copy of a large one)."""
    from gguf.quants import dequantize

    data = tensor.data
    rows = min(int(data.shape[0]), n_vocab)
    n_embd = int(tensor.shape[0])
    dtype = np.float32 if rows * n_embd * 4 <= F32_MAX_BYTES else np.float16
    out = np.empty((rows, n_embd), dtype=dtype)
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, rows)
        block = dequantize(data[start:stop], tensor.tensor_type)
        out[start:stop] = np.asarray(block).reshape(stop - start, n_embd)
    return out


def _row_norms(matrix: np.ndarray) -> np.ndarray:
    norms = np.empty(len(matrix), dtype=np.float32)
    for start in range(0, len(matrix), CHUNK_ROWS):
        block = matrix[start : start + CHUNK_ROWS].astype(np.float32)
        norms[start : start + len(block)] = np.sqrt((block * block).sum(axis=1))
    norms[norms == 0] = 1.0
    return norms


def _matmul_t(x: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """x @ matrix.T in float32; a float16 matrix is converted a chunk at a time."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if matrix.dtype == np.float32:
        return x @ matrix.T
    out = np.empty((len(x), len(matrix)), dtype=np.float32)
    buf = np.empty((CHUNK_ROWS, matrix.shape[1]), dtype=np.float32)
    for start in range(0, len(matrix), CHUNK_ROWS):
        n = min(CHUNK_ROWS, len(matrix) - start)
        np.copyto(buf[:n], matrix[start : start + n])
        np.matmul(x, buf[:n].T, out=out[:, start : start + n])
    return out
