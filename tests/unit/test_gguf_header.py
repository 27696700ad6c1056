"""GGUF header reading and validation: the bundled model, and malformed files built here."""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import pytest
from fakes.gguf_files import build, kv_str, kv_str_array, kv_u32, s, tensor, write

from chatapp.errors import ModelFileError
from chatapp.gguf import header as gguf_header
from chatapp.gguf.header import inspect, read_header, validate
from chatapp.models.bundled import smollm2_path


def refused(path: Path) -> str:
    with pytest.raises(ModelFileError) as info:
        validate(path)
    message = str(info.value)
    assert str(path) in message, message  # every refusal names the file
    assert "\n" not in message
    return message


# ---- the bundled model -----------------------------------------------------------------------


def test_bundled_model_card():
    card = inspect(smollm2_path())
    assert card.architecture == "llama"
    assert card.n_layers == 30
    assert card.vocab_size == 49152
    assert card.has_chat_template
    assert card.quant == "Q4_1"
    assert (card.n_heads, card.n_kv_heads, card.n_embd, card.head_dim) == (9, 3, 576, 64)
    assert card.tokenizer == "gpt2"
    assert card.context_length == 8192
    assert card.license == "apache-2.0"
    assert card.file_size == smollm2_path().stat().st_size
    assert 134e6 < card.n_params < 136e6
    assert dict(card.tensor_types) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert card.warnings == ()
    assert card.to_dict()["tensor_types"]["Q4_1"] == 210


def test_bundled_header_matches_the_gguf_package():
    import gguf

    mine = read_header(smollm2_path())
    theirs = gguf.GGUFReader(str(smollm2_path()))
    assert [t.name for t in mine.tensors] == [t.name for t in theirs.tensors]
    assert [t.offset for t in mine.tensors] == [int(t.data_offset) for t in theirs.tensors]
    assert [t.nbytes for t in mine.tensors] == [int(t.n_bytes) for t in theirs.tensors]
    assert [t.type_id for t in mine.tensors] == [int(t.tensor_type) for t in theirs.tensors]
    assert len(mine.metadata) == len(theirs.fields) - 3  # the reader adds 3 GGUF.* fields


def test_validate_is_fast():
    validate(smollm2_path())  # warm the page cache
    t0 = time.perf_counter()
    validate(smollm2_path())
    assert time.perf_counter() - t0 < 0.5  # header only: ~30 ms here


def test_path_with_spaces_and_unicode(tmp_path):
    folder = tmp_path / "mes modèles ✓"
    folder.mkdir()
    link = folder / "Smol LM 2 — 135M ünï.gguf"
    link.symlink_to(smollm2_path())
    validate(link)
    assert inspect(link).n_layers == 30
    assert inspect(str(link)).path == str(link)


def test_truncated_download_of_the_real_model(tmp_path):
    path = tmp_path / "partial.gguf"
    with smollm2_path().open("rb") as src, path.open("wb") as dst:
        dst.write(src.read(40_000_000))
    message = refused(path)
    assert "truncated" in message and "incomplete download" in message


# ---- files built here ------------------------------------------------------------------------


def test_minimal_file_is_valid(tmp_path):
    path = write(tmp_path, build())
    validate(path)
    card = inspect(path)
    assert card.architecture == "llama" and card.n_tensors == 1 and card.n_params == 32
    assert card.quant == "guessed F32" or card.quant == "unknown"


def test_quant_name_comes_from_the_file_type_then_the_file_name(tmp_path):
    from chatapp.gguf.header import file_quant, quant_name

    # The bundled model's header says Q4_1 (general.file_type 3), as its name does.
    assert read_header(smollm2_path()).metadata["general.file_type"] == 3
    assert file_quant(smollm2_path()) == "Q4_1"
    base = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1)]
    # The header wins over a file name that says otherwise.
    typed = write(tmp_path, build(kvs=[*base, kv_u32("general.file_type", 15)]), "x.Q8_0.gguf")
    assert file_quant(typed) == "Q4_K_M" and inspect(typed).quant == "Q4_K_M"
    # No file type in the header (or one the table lacks): the file name says.
    untyped = write(tmp_path, build(kvs=base), "SmolLM2-135M.q5_k_m.gguf")
    assert file_quant(untyped) == "Q5_K_M" and inspect(untyped).quant == "Q5_K_M"
    odd = write(tmp_path, build(kvs=[*base, kv_u32("general.file_type", 999)]), "m-F16.gguf")
    assert file_quant(odd) == "F16"
    # Neither: '' (the card then guesses from the tensor types).
    assert file_quant(write(tmp_path, build(kvs=base), "model.gguf")) == ""
    # Not a GGUF file at all: the name alone; llama-cpp-python's metadata strings work too.
    junk = write(tmp_path, b"not a model", "gemma-3-270m-IQ4_XS.gguf")
    assert file_quant(junk) == "IQ4_XS"
    assert quant_name("15") == "Q4_K_M" and quant_name(None) == ""


def test_unknown_architecture_is_a_warning_not_an_error(tmp_path):
    path = write(tmp_path, build(kvs=[kv_str("general.architecture", "frobnicator")]))
    validate(path)
    assert "frobnicator" in inspect(path).warnings[0]


def test_missing_file(tmp_path):
    assert "not found" in refused(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    folder = tmp_path / "a.gguf"
    folder.mkdir()
    assert "is a directory" in refused(folder)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_by_mode(tmp_path):
    path = write(tmp_path, build())
    path.chmod(0)
    try:
        assert "permission denied" in refused(path)
    finally:
        path.chmod(0o644)


def test_unreadable(tmp_path, monkeypatch):
    path = write(tmp_path, build())

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", deny)  # what a mode-000 file does to a non-root user
    assert "permission denied" in refused(path)


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(fifo)  # and it does not block on open


def test_empty_file(tmp_path):
    assert "it is empty" in refused(write(tmp_path, b""))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x00" * 64, "does not start with the GGUF magic"),
        (b"GGU", "does not start with the GGUF magic"),
        (b"<!DOCTYPE html><html><body>404</body></html>", "HTML page"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "Git LFS pointer"),
        (b"PK\x03\x04" + b"\0" * 60, "ZIP archive"),
        (b"ggjt" + b"\0" * 60, "old GGML file"),
    ],
)
def test_wrong_magic(tmp_path, data, expected):
    assert expected in refused(write(tmp_path, data))


@pytest.mark.parametrize("version", [1, 99, 0])
def test_unsupported_version(tmp_path, version):
    message = refused(write(tmp_path, build(version=version)))
    assert f"GGUF version {version} is" in message


def test_big_endian(tmp_path):
    data = bytearray(build())
    data[4:8] = struct.pack(">I", 3)
    assert "big-endian" in refused(write(tmp_path, bytes(data)))


def test_truncated_header(tmp_path):
    full = build(kvs=[kv_str("general.name", "x" * 200), kv_str("general.architecture", "llama")])
    message = refused(write(tmp_path, full[:120]))  # inside the first value
    assert "header is truncated (the value of 'general.name' at byte 56" in message
    assert "header is truncated" in refused(write(tmp_path, full[:12], "b.gguf"))


@pytest.mark.parametrize(("n_kv", "n_tensors"), [(10**12, None), (None, 2**40), (2**63, 2**63)])
def test_absurd_counts(tmp_path, n_kv, n_tensors):
    message = refused(write(tmp_path, build(n_kv=n_kv, n_tensors=n_tensors)))
    assert "more than a" in message and "file can hold" in message


def test_duplicate_key(tmp_path):
    kvs = [kv_str("general.architecture", "llama"), kv_str("general.architecture", "gpt2")]
    assert "duplicate metadata key 'general.architecture'" in refused(
        write(tmp_path, build(kvs=kvs))
    )


def test_empty_key(tmp_path):
    kvs = [kv_str("general.architecture", "llama"), kv_str("", "x")]
    assert "metadata entry #1 has an empty key" in refused(write(tmp_path, build(kvs=kvs)))


def test_unknown_value_type(tmp_path):
    kvs = [s("general.thing") + struct.pack("<II", 77, 0)]
    assert "unknown value type 77" in refused(write(tmp_path, build(kvs=kvs)))


def test_huge_string_length(tmp_path):
    kvs = [s("general.name") + struct.pack("<IQ", 8, 2**62) + b"x"]
    assert "header is truncated" in refused(write(tmp_path, build(kvs=kvs)))


def test_huge_string_array(tmp_path):
    kvs = [s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**40)]
    assert "header is truncated" in refused(write(tmp_path, build(kvs=kvs)))


def test_bad_alignment(tmp_path):
    kvs = [kv_str("general.architecture", "llama"), kv_u32("general.alignment", 24)]
    assert "not a power of two" in refused(write(tmp_path, build(kvs=kvs)))


def test_zero_dimension(tmp_path):
    path = write(tmp_path, build(tensors=[tensor("blk.0.w", (32, 0))]))
    assert "tensor 'blk.0.w' has a zero-sized dimension" in refused(path)


def test_too_many_dimensions(tmp_path):
    path = write(tmp_path, build(tensors=[tensor("w", (32, 1, 1, 1, 1))]))
    assert "5 dimensions" in refused(path)


def test_duplicate_tensor_name(tmp_path):
    tensors = [tensor("w", (32,)), tensor("w", (32,), offset=128)]
    path = write(tmp_path, build(tensors=tensors, data=b"\0" * 256))
    assert "duplicate tensor name 'w'" in refused(path)


def test_unknown_tensor_type(tmp_path):
    assert "unknown ggml type 5" in refused(write(tmp_path, build(tensors=[tensor("w", (32,), 5)])))


def test_row_not_a_multiple_of_the_block(tmp_path):
    path = write(tmp_path, build(tensors=[tensor("w", (33,), 8)]))  # Q8_0 blocks of 32
    assert "not a multiple of Q8_0 blocks" in refused(path)


def test_tensor_data_past_the_end(tmp_path):
    path = write(tmp_path, build(data=b"\0" * 100))  # 128 bytes needed
    message = refused(path)
    assert "is truncated (an incomplete download?)" in message
    assert "tensor 'blk.0.w'" in message


def test_tensor_offset_out_of_order(tmp_path):
    path = write(tmp_path, build(tensors=[tensor("w", (32,), offset=64)], data=b"\0" * 256))
    assert "data offset 64, expected 0" in refused(path)


def test_string_array_is_counted_not_decoded(tmp_path):
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str_array("tokenizer.ggml.tokens", list("abc")),
    ]
    path = write(tmp_path, build(kvs=kvs))
    assert read_header(path).metadata["tokenizer.ggml.tokens"] == gguf_header.ArrayValue(
        "string", 3
    )
    assert inspect(path).vocab_size == 3


def test_every_truncation_is_an_engine_error(tmp_path):
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str_array("tokenizer.ggml.tokens", list("abc")),
    ]
    full = build(kvs=kvs)
    path = tmp_path / "cut.gguf"
    for n in range(len(full)):
        path.write_bytes(full[:n])
        with pytest.raises(ModelFileError):
            validate(path)


def test_byte_flips_never_crash(tmp_path):
    full = build(
        kvs=[
            kv_str("general.architecture", "llama"),
            kv_u32("llama.block_count", 1),
            kv_str("general.name", "tiny"),
        ]
    )
    path = tmp_path / "flip.gguf"
    header_end = len(full) - 128
    for i in range(4, header_end):
        for value in (0x00, 0xFF, 0x7F):
            data = bytearray(full)
            data[i] = value
            path.write_bytes(bytes(data))
            try:
                validate(path)
            except ModelFileError:
                pass


def test_engine_check_uses_validate(tmp_path):
    from chatapp.engine.local.process.child import check_model_file

    path = write(tmp_path, build(tensors=[tensor("blk.0.w", (32, 0))]))
    with pytest.raises(ModelFileError, match="zero-sized dimension"):
        check_model_file(str(path))


def test_copy_of_the_bundled_model_is_valid(tmp_path):
    path = tmp_path / "copy of model.gguf"
    shutil.copyfile(smollm2_path(), path)
    assert gguf_header.inspect(path).quant == "Q4_1"
