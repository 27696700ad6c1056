"""llama.cpp's control-vector GGUF files: read, written, summed as its loader sums them.

The format (llama-cvector-generator, repeng and `chatapp steer make` write it): architecture
`controlvector`, the keys `controlvector.model_hint` (the model's architecture) and
`controlvector.layer_count`, and one float32 tensor `direction.N` of the model's width per layer
N >= 1 (a file may hold one layer twice, e.g. direction.1 and direction.01: llama.cpp's loader
adds them, and so does chatapp). llama.cpp adds direction.N, times the strength, to the
residual stream after layer N (blocks counted from 0: after the N+1-th block), for N from 1 to
n_layers-1 (steer_checks); like llama-cvector-generator and repeng, `steer make` measures
direction.N on the stream that comes out of the block before (block N-1), so a file made here
and one made by either tool mean the same at each N.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chatapp.engine.steering import SteeringError
from chatapp.errors import ModelFileError

ARCHITECTURE = "controlvector"
_DIRECTION = re.compile(r"direction\.([0-9]+)")  # ASCII digits, as std::stoi reads
GGML_F32 = 0
MAX_WIDTH = 1 << 16


@dataclass(frozen=True, eq=False)
class ControlVector:
    """One direction (float32, n_embd) per layer N >= 1, and the architecture it was made on.
    `terms`: the file's tensors in its order, where it holds a layer more than once
    (directions holds their sum; combined() adds each times the strength, as llama.cpp does);
    empty: one tensor per layer, `directions`."""

    directions: dict[int, np.ndarray]
    model_hint: str = ""
    terms: tuple[tuple[int, np.ndarray], ...] = ()

    @property
    def n_embd(self) -> int:
        return int(next(iter(self.directions.values())).shape[0]) if self.directions else 0

    @property
    def last_layer(self) -> int:
        return max(self.directions, default=0)

    def unit(self, layer: int) -> np.ndarray | None:
        """direction.layer scaled to length 1 (None when the file has none, or it is zero)."""
        d = self.directions.get(layer)
        if d is None:
            return None
        norm = float(np.linalg.norm(d))
        return d / norm if norm > 0 else None


def read(path: str | Path) -> ControlVector:
    """A control vector file; raises SteeringError (one sentence) for anything else."""
    from chatapp.gguf.header import read_header

    name = str(path)
    try:
        header = read_header(path)
    except ModelFileError as exc:
        raise SteeringError(
            f"{exc}; a control vector is a GGUF file of direction.N tensors"
        ) from exc
    terms = [_term(name, t, header.tensors[0]) for t in header.tensors]
    if not terms:
        raise SteeringError(f"{name} holds no direction.N tensors: it is not a control vector")
    if not all(np.isfinite(d).all() for _, d in terms):
        raise SteeringError(f"{name} is not a usable control vector: it holds NaN or infinity")
    found: dict[int, np.ndarray] = {}
    for layer, d in terms:  # a layer held twice: the sum, as llama.cpp's loader makes it
        found[layer] = found[layer] + d if layer in found else d
    repeated = tuple(terms) if len(found) < len(terms) else ()
    hint = header.metadata.get(f"{ARCHITECTURE}.model_hint", "")
    return ControlVector(found, hint if isinstance(hint, str) else "", repeated)


def _term(name: str, t, first) -> tuple[int, np.ndarray]:
    """(layer, direction) of one tensor of a control-vector file; SteeringError otherwise."""
    match = _DIRECTION.fullmatch(t.name)
    if match is None or int(match.group(1)) == 0:
        raise SteeringError(
            f"{name} is not a control vector: it holds the tensor '{t.name}', where a "
            "control vector holds only direction.1, direction.2, ..."
        )
    if t.type_id != GGML_F32 or len(t.shape) != 1:
        raise SteeringError(
            f"{name} is not a usable control vector: {t.name} must be one row of float32, "
            f"it is {t.type_name} of shape {list(t.shape)}"
        )
    width = first.shape[0]
    if t.shape[0] != width:
        raise SteeringError(
            f"{name} is not a usable control vector: its directions are not all one width "
            f"({first.name} is {width} wide, {t.name} {t.shape[0]})"
        )
    if width > MAX_WIDTH:
        raise SteeringError(
            f"{name} is not a usable control vector: its directions are {width} wide, wider "
            f"than any model's residual stream (up to {MAX_WIDTH})"
        )
    return int(match.group(1)), np.fromfile(name, dtype="<f4", count=width, offset=t.offset)


def write(path: str | Path, vector: ControlVector, *, replace: bool = True) -> None:
    """Write it as llama-cvector-generator does, through a temporary file and a rename. With
    replace=False a file already there (one made meanwhile by another `steer make` or the
    Steer tab) is kept and SteeringError says so: the new file is linked in only where none is."""
    from gguf import GGUFWriter

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}-", suffix=".gguf")
    os.close(fd)
    try:
        writer = GGUFWriter(tmp, ARCHITECTURE)
        writer.add_string(f"{ARCHITECTURE}.model_hint", vector.model_hint)
        writer.add_int32(f"{ARCHITECTURE}.layer_count", len(vector.directions))
        for layer in sorted(vector.directions):
            data = np.ascontiguousarray(vector.directions[layer], dtype=np.float32)
            writer.add_tensor(f"direction.{layer}", data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        if replace:
            os.replace(tmp, target)
        else:
            _link_new(Path(tmp), target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _link_new(tmp: Path, target: Path) -> None:
    """Put `tmp` at `target` only if nothing is there (a hard link fails on an existing name,
    atomically; where links are not supported, a check just before the rename)."""
    taken = SteeringError(
        f"{target} was made meanwhile (another steer make?); it is kept and nothing was "
        "overwritten: make this one under another name, or again with --replace"
    )
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise taken from None
    except OSError:
        if target.exists():
            raise taken from None
        os.replace(tmp, target)


def combined(vectors: list[tuple[ControlVector, float]], n_layers: int) -> np.ndarray:
    """The buffer llama_set_adapter_cvec takes: n_embd floats per layer 1..n_layers-1, each
    file's direction times its strength, summed over files - in float32, in the order
    llama.cpp's own loader (common_control_vector_load) adds them, so the sums are the same:
    each file's tensors in its order (a layer held twice: both), then the files' sums."""
    n_embd = vectors[0][0].n_embd
    total = np.zeros((max(n_layers - 1, 1), n_embd), dtype=np.float32)
    for vector, strength in vectors:
        scale = np.float32(strength)
        own = np.zeros_like(total)
        for layer, direction in vector.terms or vector.directions.items():
            if layer < n_layers:
                own[layer - 1] += direction.astype(np.float32) * scale
        total += own
    return total.reshape(-1)


def directions_from(
    positive: np.ndarray, negative: np.ndarray, method: str
) -> dict[int, np.ndarray]:
    """direction.N (length 1, as llama-cvector-generator writes them) from the residual streams
    of two sets of texts, [texts, layers, n_embd] each (layer i: out of block i, so N = i + 1).

    "mean": the difference of the two means. "pca": the first principal direction of the paired
    differences (positive[i] - negative[i]; needs as many of each), signed so that the positive
    texts lie on its positive side."""
    if method == "mean":
        raw = positive.mean(axis=0) - negative.mean(axis=0)
    elif method == "pca":
        if positive.shape[0] != negative.shape[0]:
            raise SteeringError(
                f"pca pairs each positive text with a negative one: give as many of each "
                f"({positive.shape[0]} and {negative.shape[0]} given), or use --method mean"
            )
        raw = np.stack(
            [_first_component(positive[:, i] - negative[:, i]) for i in range(positive.shape[1])]
        )
    else:
        raise SteeringError(f"--method takes mean or pca, not {method!r}")
    out = {}
    for i, row in enumerate(raw.astype(np.float64)):
        norm = float(np.linalg.norm(row))
        out[i + 1] = (row / norm if norm > 0 else row).astype(np.float32)
    return out


def _first_component(diffs: np.ndarray) -> np.ndarray:
    """The direction that explains most of the paired differences (not centred: they share a
    direction), pointing the way their mean does."""
    _, _, vt = np.linalg.svd(diffs.astype(np.float64), full_matrices=False)
    top = vt[0]
    return -top if float(diffs.mean(axis=0) @ top) < 0 else top
