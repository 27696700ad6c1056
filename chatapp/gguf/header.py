"""Read and validate GGUF headers without llama.cpp (struct parsing, header only): model cards."""

from __future__ import annotations

import math
import os
import re
import stat
import struct
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chatapp.errors import ModelFileError
from chatapp.gguf.reader import ArrayValue, Cursor, read_tensor, read_value
from chatapp.gguf.tables import FILE_TYPES, GGML_TYPES, KNOWN_ARCHITECTURES

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
_MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, n_dims, one dim, type, offset


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # absolute file offset of its data
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type_id][0]

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Header:
    """A parsed, validated GGUF header."""

    path: str
    version: int
    file_size: int
    metadata: dict[str, object]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    alignment: int


@dataclass(frozen=True)
class ModelCard:
    """What a GGUF file is, from its header alone."""

    path: str
    name: str
    architecture: str
    license: str
    file_size: int
    gguf_version: int
    n_params: int
    quant: str  # quant_name (e.g. Q4_K_M), else "guessed <most common matrix type>"
    tensor_types: tuple[tuple[str, int], ...]  # (ggml type, tensor count), most common first
    weights_bytes: int  # tensor data
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_embd: int
    head_dim: int  # key head size
    head_dim_v: int  # value head size
    vocab_size: int
    tokenizer: str  # tokenizer.ggml.model: llama (SentencePiece), gpt2 (BPE), ...
    context_length: int  # trained context
    has_chat_template: bool
    n_tensors: int
    warnings: tuple[str, ...] = field(default=())

    @property
    def bits_per_weight(self) -> float:
        return self.weights_bytes * 8 / self.n_params if self.n_params else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tensor_types"] = dict(self.tensor_types)
        data["bits_per_weight"] = round(self.bits_per_weight, 3)
        data["warnings"] = list(self.warnings)
        return data


def _open_error(path: str, p: Path) -> ModelFileError | None:
    try:
        st = p.stat()
    except FileNotFoundError:
        return ModelFileError(f"model file not found: {path}")
    except PermissionError:
        return ModelFileError(f"cannot read {path}: permission denied")
    except OSError as exc:
        return ModelFileError(f"cannot read {path}: {exc.strerror or exc}")
    if stat.S_ISDIR(st.st_mode):
        return ModelFileError(f"{path} is a directory, not a GGUF model file")
    if not stat.S_ISREG(st.st_mode):
        return ModelFileError(f"{path} is not a regular file, so it cannot be a GGUF model file")
    if st.st_size == 0:
        return ModelFileError(f"{path} is not a GGUF model file (it is empty)")
    return None


def _magic_hint(head: bytes) -> str:
    """What a file that is not GGUF looks like (a failed download is common)."""
    lower = head.lstrip().lower()
    if lower.startswith((b"<!doctype", b"<html")):
        return "it is an HTML page, probably a failed download"
    if head.startswith(b"version https://git-lfs"):
        return "it is a Git LFS pointer, not the model itself (run `git lfs pull`)"
    if head.startswith(b"PK\x03\x04"):
        return "it is a ZIP archive, e.g. a PyTorch checkpoint; convert it to GGUF first"
    if head[:4] in (b"lmgg", b"fmgg", b"tjgg", b"ggml", b"ggmf", b"ggjt"):
        return "it is an old GGML file from before GGUF; convert it again"
    if len(head) >= 9 and head[8:9] == b"{":
        return "it looks like a safetensors file; convert it to GGUF first"
    return "it does not start with the GGUF magic"


def read_header(path: str | Path) -> Header:
    """Parse and check a GGUF header; raises ModelFileError (one sentence) on any problem."""
    p = Path(path)
    name = str(path)
    err = _open_error(name, p)
    if err is not None:
        raise err
    try:
        with p.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(64)
            if head[:4] != GGUF_MAGIC:
                raise ModelFileError(f"{name} is not a GGUF model file ({_magic_hint(head)})")
            return _parse(name, fh, size)
    except PermissionError as exc:
        raise ModelFileError(f"cannot read {name}: permission denied") from exc
    except OSError as exc:  # an I/O error while reading
        raise ModelFileError(
            f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}"
        ) from exc


def _parse(path: str, fh, size: int) -> Header:
    c = Cursor(path, fh, size)
    c.pos = 4
    version = c.unpack("<I", "the version")
    if version not in SUPPORTED_VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        if swapped in SUPPORTED_VERSIONS:
            raise c.bad("it is a big-endian GGUF file, which this machine cannot load")
        if version == 1:
            raise c.bad("GGUF version 1 is too old; llama.cpp reads versions 2 and 3")
        raise c.bad(f"GGUF version {version} is not supported; llama.cpp reads versions 2 and 3")
    n_tensors = c.unpack("<Q", "the tensor count")
    n_kv = c.unpack("<Q", "the metadata count")
    room = size - c.pos
    if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_BYTES > room:
        raise c.bad(
            f"the header claims {_count(n_kv, 'metadata entry', 'metadata entries')} and "
            f"{_count(n_tensors, 'tensor', 'tensors')}, "
            f"more than a {size:,}-byte file can hold"
        )
    metadata: dict[str, object] = {}
    for i in range(n_kv):
        key = c.string(f"metadata key #{i}")
        if not key:
            raise c.bad(f"metadata entry #{i} has an empty key")
        if key in metadata:
            raise c.bad(f"duplicate metadata key '{key}'")
        metadata[key] = read_value(c, key)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise c.bad(f"general.alignment is {alignment!r}, not a power of two")
    infos = []
    seen: set[str] = set()
    for i in range(n_tensors):
        infos.append(read_tensor(c, i, seen))
    data_offset = -(-c.pos // alignment) * alignment if n_tensors else c.pos
    tensors = []
    expected = 0
    for tname, shape, type_id, rel, nbytes in infos:
        if rel != expected:
            raise c.bad(f"tensor '{tname}' has data offset {rel:,}, expected {expected:,}")
        end = data_offset + rel + nbytes
        if end > size:
            raise ModelFileError(
                f"{path} is truncated (an incomplete download?): tensor '{tname}' needs data "
                f"up to byte {end:,} but the file has only {size:,} bytes"
            )
        tensors.append(TensorInfo(tname, shape, type_id, data_offset + rel, nbytes))
        expected = rel + -(-nbytes // alignment) * alignment
    return Header(path, version, size, metadata, tuple(tensors), data_offset, alignment)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def validate(path: str | Path) -> None:
    """Refuse a file llama.cpp cannot load (or would abort on), from its header alone."""
    read_header(path)


def _array_length(value: object) -> int:
    """The number of entries of a metadata array (decoded or not); 0 for anything else."""
    if isinstance(value, ArrayValue):
        return value.count
    return len(value) if isinstance(value, tuple) else 0


def _first_int(value: object, default: int = 0) -> int:
    """A metadata number, or the largest entry of a per-layer array."""
    if isinstance(value, tuple) and value:
        return int(max(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return default


_QUANT_IN_NAME = re.compile(r"(?i)(I?Q[0-9](_[0-9A-Z]+)*|B?F16|F32|MXFP4)")


def quant_name(file_type: object, path: str | Path = "") -> str:
    """The one answer to "which quantization is this file": the name of its header's
    general.file_type (llama_ftype: 15 -> Q4_K_M), and only when the header does not say
    (no file type, or one this table lacks), the type its file name names
    (SmolLM2.Q4_1.gguf -> Q4_1); '' when neither does.

    `file_type` is the header's value: an int from read_header, or the decimal string that
    llama-cpp-python's Llama.metadata holds.
    """
    if isinstance(file_type, str) and file_type.strip().isdigit():
        file_type = int(file_type)
    if isinstance(file_type, int) and not isinstance(file_type, bool) and file_type in FILE_TYPES:
        return FILE_TYPES[file_type]
    stem = Path(path).name.removesuffix(".gguf") if path else ""
    for part in reversed(re.split(r"[-.]", stem)):
        if _QUANT_IN_NAME.fullmatch(part):
            return part.upper()
    return ""


def file_quant(path: str | Path) -> str:
    """quant_name of a file on disk, from its header; from the name alone if it has none."""
    try:
        file_type = read_header(path).metadata.get("general.file_type")
    except (ModelFileError, OSError):
        file_type = None
    return quant_name(file_type, path)


def card_from_header(h: Header) -> ModelCard:
    """The model card of a parsed header."""
    md = h.metadata
    arch = str(md.get("general.architecture", ""))

    def a(key: str, default: int = 0) -> int:
        return _first_int(md.get(f"{arch}.{key}"), default)

    n_heads = a("attention.head_count")
    n_embd = a("embedding_length")
    head_dim = a("attention.key_length") or (n_embd // n_heads if n_heads else 0)
    tokens = md.get("tokenizer.ggml.tokens")
    vocab = _array_length(tokens)
    vocab = vocab or a("vocab_size")
    counts = Counter(t.type_name for t in h.tensors)
    quant = quant_name(md.get("general.file_type"), h.path)
    if not quant:
        matrices = Counter(t.type_name for t in h.tensors if len(t.shape) >= 2)
        quant = f"guessed {matrices.most_common(1)[0][0]}" if matrices else "unknown"
    warnings = []
    if not arch:
        warnings.append("the file names no architecture (general.architecture)")
    elif arch not in KNOWN_ARCHITECTURES:
        warnings.append(f"architecture '{arch}' is unknown to this llama.cpp; it may not load")
    return ModelCard(
        path=h.path,
        name=str(md.get("general.name", "")) or Path(h.path).stem,
        architecture=arch,
        license=str(md.get("general.license", "")),
        file_size=h.file_size,
        gguf_version=h.version,
        n_params=sum(t.n_elements for t in h.tensors),
        quant=quant,
        tensor_types=tuple(counts.most_common()),
        weights_bytes=sum(t.nbytes for t in h.tensors),
        n_layers=a("block_count"),
        n_heads=n_heads,
        n_kv_heads=a("attention.head_count_kv") or n_heads,
        n_embd=n_embd,
        head_dim=head_dim,
        head_dim_v=a("attention.value_length") or head_dim,
        vocab_size=vocab,
        tokenizer=str(md.get("tokenizer.ggml.model", "")),
        context_length=a("context_length"),
        has_chat_template=bool(md.get("tokenizer.chat_template")),
        n_tensors=len(h.tensors),
        warnings=tuple(warnings),
    )


def inspect(path: str | Path) -> ModelCard:
    """Read a GGUF file's header into a ModelCard (raises ModelFileError on an invalid file)."""
    return card_from_header(read_header(path))
