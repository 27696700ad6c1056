"""Bounds-checked reads of a GGUF header's parts: the cursor, metadata values, tensor entries."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from chatapp.errors import ModelFileError
from chatapp.gguf.tables import GGML_TYPES

MAX_DIMS = 4
MAX_TENSOR_NAME = 63  # GGML_MAX_NAME - 1
SMALL_ARRAY = 1024  # numeric arrays up to this length are decoded (per-layer head counts, ...)

# GGUF metadata value types: strings, arrays, and the scalars: id -> (name, struct format).
_STRING, _ARRAY = 8, 9
_SCALAR_TYPES: dict[int, tuple[str, str]] = {
    0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"), 4: ("u32", "<I"),
    5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"), 10: ("u64", "<Q"),
    11: ("i64", "<q"), 12: ("f64", "<d"),
}  # fmt: skip
_VALUE_TYPES = {_STRING, _ARRAY, *_SCALAR_TYPES}  # every value type GGUF defines


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array that was not decoded (strings, or long numeric arrays)."""

    item_type: str
    count: int
    longest: int = field(default=0, compare=False)  # strings: the longest one's bytes


class Cursor:
    """Bounds-checked little-endian reads of the header, read from the file as it is needed."""

    CHUNK = 1 << 20

    def __init__(self, path: str, fh, size: int) -> None:
        self.path, self.fh, self.size, self.pos = path, fh, size, 0
        self.buf = bytearray()

    def bad(self, reason: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a valid GGUF file: {reason}")

    def need(self, n: int, what: str) -> None:
        end = self.pos + n
        if n < 0 or end > self.size:
            raise self.bad(
                f"the header is truncated ({what} at byte {self.pos:,} runs past the end "
                f"of the {self.size:,}-byte file)"
            )
        if end > len(self.buf):
            self.fh.seek(len(self.buf))
            while len(self.buf) < end:
                chunk = self.fh.read(max(self.CHUNK, end - len(self.buf)))
                if not chunk:  # the file shrank while we read it
                    raise self.bad(f"the file ended early while reading {what}")
                self.buf += chunk

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def raw_string(self, what: str) -> bytes:
        n = self.unpack("<Q", what + " length")
        self.need(n, what)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def string(self, what: str) -> str:
        return self.raw_string(what).decode("utf-8", errors="replace")

    def skip_strings(self, count: int, what: str) -> int:
        """Step over `count` strings; the longest one's length in bytes."""
        buf, pos, size, unpack_from = self.buf, self.pos, self.size, struct.unpack_from
        have = len(buf)
        longest = 0
        for _ in range(count):
            if pos + 8 > have:
                self.pos = pos
                self.need(8, what)
                have = len(buf)
            n = unpack_from("<Q", buf, pos)[0]
            end = pos + 8 + n
            if end > size:
                self.pos = pos + 8
                self.need(end - pos - 8, what)  # raises: this string runs past the end
            pos = end
            longest = max(longest, n)
        self.pos = pos
        return longest


def read_value(c: Cursor, key: str) -> object:
    vtype = c.unpack("<I", f"the type of '{key}'")
    if vtype not in _VALUE_TYPES:
        raise c.bad(f"metadata key '{key}' has an unknown value type {vtype}")
    if vtype == _STRING:
        return c.string(f"the value of '{key}'")
    if vtype != _ARRAY:
        return c.unpack(_SCALAR_TYPES[vtype][1], f"the value of '{key}'")
    itype = c.unpack("<I", f"the array type of '{key}'")
    count = c.unpack("<Q", f"the array length of '{key}'")
    if itype not in _VALUE_TYPES or itype == _ARRAY:
        what = "an array of arrays" if itype == _ARRAY else f"an unknown type {itype}"
        raise c.bad(f"metadata key '{key}' is {what}, which llama.cpp cannot read")
    if itype == _STRING:
        c.need(count * 8, f"the strings of '{key}'")
        longest = c.skip_strings(count, f"the strings of '{key}'")
        return ArrayValue("string", count, longest)
    item_name, fmt = _SCALAR_TYPES[itype]
    width = struct.calcsize(fmt)
    c.need(count * width, f"the array '{key}'")
    start = c.pos
    c.pos += count * width
    if count <= SMALL_ARRAY:
        return struct.unpack_from(f"<{count}{fmt[1]}", c.buf, start)
    return ArrayValue(item_name, count)


def read_tensor(c: Cursor, i: int, seen: set[str]) -> tuple:
    name = c.string(f"the name of tensor #{i}")
    if not name:
        raise c.bad(f"tensor #{i} has an empty name")
    if len(name.encode()) > MAX_TENSOR_NAME:
        raise c.bad(f"tensor name '{name[:40]}...' is longer than {MAX_TENSOR_NAME} bytes")
    if name in seen:
        raise c.bad(f"duplicate tensor name '{name}'")
    seen.add(name)
    n_dims = c.unpack("<I", f"the dimensions of '{name}'")
    if n_dims == 0 or n_dims > MAX_DIMS:
        raise c.bad(f"tensor '{name}' has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    c.need(8 * n_dims, f"the shape of '{name}'")
    shape = struct.unpack_from(f"<{n_dims}q", c.buf, c.pos)
    c.pos += 8 * n_dims
    if any(d <= 0 for d in shape):
        kind = "a zero-sized" if 0 in shape else "a negative"
        raise c.bad(f"tensor '{name}' has {kind} dimension {list(shape)}")
    type_id = c.unpack("<I", f"the type of '{name}'")
    if type_id not in GGML_TYPES:
        raise c.bad(f"tensor '{name}' has an unknown ggml type {type_id}")
    tname, block, block_bytes = GGML_TYPES[type_id]
    if shape[0] % block:
        raise c.bad(f"tensor '{name}' rows of {shape[0]} are not a multiple of {tname} blocks")
    n = math.prod(shape)
    if n >= 2**63:
        raise c.bad(f"tensor '{name}' has an impossible shape {list(shape)}")
    offset = c.unpack("<Q", f"the offset of '{name}'")
    return name, tuple(shape), type_id, offset, n // block * block_bytes
