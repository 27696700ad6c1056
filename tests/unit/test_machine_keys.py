"""What a saved tune is keyed by: the file's content, the build's libraries and this CPU,
never paths or times (a moved file and a reinstall of the same build keep it)."""

from __future__ import annotations

import os
import shutil

from chatapp import machine


def test_a_moved_or_copied_file_keeps_its_key_and_another_file_does_not(tmp_path, model_path):
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(model_path, copy)
    os.utime(copy, (1, 1))  # another time too
    assert machine.file_key(str(copy)) == machine.file_key(model_path)
    other = tmp_path / "other.gguf"
    data = bytearray(open(model_path, "rb").read(4 << 20))
    data[len(data) // 2] ^= 1
    other.write_bytes(bytes(data))
    assert machine.file_key(str(other)) != machine.file_key(model_path)


def test_a_reinstall_of_the_same_build_keeps_the_key(tmp_path):
    first, second = tmp_path / "site-a" / "lib", tmp_path / "site-b" / "lib"
    for lib, when in ((first, 1_000_000), (second, 2_000_000)):
        lib.mkdir(parents=True)
        for name, size in (("libllama.so", 300), ("libggml-cpu.so", 200)):
            (lib / name).write_bytes(b"\0" * size)
            os.utime(lib / name, (when, when))
        (lib / "libllama.so.0").symlink_to("libllama.so")
    assert machine.libs_identity([first]) == machine.libs_identity([second])
    (second / "libggml-cuda.so").write_bytes(b"\0" * 900)  # a CUDA build is another build
    assert machine.libs_identity([first]) != machine.libs_identity([second])


def test_a_saved_tune_survives_a_move(tmp_path, model_path, fresh_dirs):
    machine.remember_tuned(model_path, {"threads": 2, "flash_attn": True})
    moved = tmp_path / "moved.gguf"
    shutil.copyfile(model_path, moved)
    assert machine.tuned(str(moved)) == {"threads": 2, "flash_attn": True}
