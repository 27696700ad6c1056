"""Build GGUF files for tests: tiny malformed ones from scratch, and edited copies of a real one."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

from chatapp.gguf.header import read_header


def s(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", 8) + s(value)


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", 4, value)


def kv_str_array(key: str, values: list[str]) -> bytes:
    return s(key) + struct.pack("<IIQ", 9, 8, len(values)) + b"".join(s(v) for v in values)


def tensor(name: str, dims: tuple[int, ...], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (
        s(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def build(
    kvs: list[bytes] | None = None,
    tensors: list[bytes] | None = None,
    data: bytes = b"\0" * 128,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    magic: bytes = b"GGUF",
) -> bytes:
    """A GGUF file: by default one F32 tensor of 32 elements and an architecture key."""
    kvs = (
        [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1)]
        if kvs is None
        else kvs
    )
    tensors = [tensor("blk.0.w", (32,))] if tensors is None else tensors
    head = magic + struct.pack(
        "<IQQ",
        version,
        len(tensors) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % 32)
    return body + data


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def with_string(src: Path, dst: Path, key: str, value: str) -> Path:
    """A copy of a real GGUF file with one string metadata value replaced; tensors untouched.

    Only the header is rebuilt (tensor offsets are relative to the data section, so they stay
    valid); the tensor data is copied as is. About 0.1 s for the 98 MB bundled model.
    """
    h = read_header(src)
    with open(src, "rb") as fh:
        head = fh.read(h.data_offset)
    needle = s(key) + struct.pack("<I", 8)
    start = head.find(needle)
    if start < 0:
        raise KeyError(f"{src} has no string key {key!r}")
    value_at = start + len(needle)
    (old_len,) = struct.unpack_from("<Q", head, value_at)
    end = value_at + 8 + old_len
    last = h.tensors[-1]
    info_at = head.rfind(s(last.name) + struct.pack("<I", len(last.shape)))
    info_end = info_at + len(s(last.name)) + 4 + 8 * len(last.shape) + 4 + 8
    new = head[:start] + needle + s(value) + head[end:info_end]
    new += b"\0" * (-len(new) % h.alignment)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(new)
        fin.seek(h.data_offset)
        shutil.copyfileobj(fin, fout, 16 << 20)
    os.utime(dst)
    return dst
