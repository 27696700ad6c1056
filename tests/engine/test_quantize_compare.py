"""Quantize the bundled model with llama.cpp, list the files, and compare them (real runs)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from fakes.engines import FakeEngine

from chatapp import paths
from chatapp.commands.models import compare_cmd, models_cmd, quantize_cmd
from chatapp.engine.protocol import EngineError, LoadOptions
from chatapp.errors import ModelFileError
from chatapp.gguf.header import inspect
from chatapp.models import compare, compare_format, compare_runs, discovery, quantize
from chatapp.models.bundled import smollm2_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The bundled model quantized to Q8_0 and Q2_K, with the seconds each took."""
    out = tmp_path_factory.mktemp("quantized")
    results = {}
    for qtype in ("Q8_0", "Q2_K"):
        results[qtype] = quantize.quantize(smollm2_path(), qtype, out, nthread=2)
    return results


def test_quantize_writes_valid_files(quantized):
    for qtype, result in quantized.items():
        card = inspect(result.output)
        assert card.quant == qtype
        assert result.output.endswith(f"SmolLM2-135M-Instruct.{qtype}.gguf")
        assert result.size_bytes == card.file_size
        assert result.seconds < 30
        assert "quality cannot exceed the source" in result.warning  # the source is Q4_1
    assert quantized["Q8_0"].size_bytes > smollm2_path().stat().st_size
    assert quantized["Q2_K"].size_bytes < smollm2_path().stat().st_size
    assert dict(inspect(quantized["Q8_0"].output).tensor_types)["Q8_0"] == 211
    assert not list(Path(quantized["Q8_0"].output).parent.glob("*.part"))


def test_names_and_types(tmp_path):
    assert quantize.normalize_type("q4_k") == "Q4_K_M"
    assert quantize.normalize_type("Q3_K") == "Q3_K_M"
    for name in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K"):
        assert quantize.normalize_type(name) == name
    with pytest.raises(EngineError, match="unknown quantization type 'Q9'"):
        quantize.normalize_type("Q9")
    src = tmp_path / "Model-7B.Q4_K_M.gguf"
    assert quantize.output_path(src, "Q8_0", tmp_path).name == "Model-7B.Q8_0.gguf"
    assert quantize.output_path(tmp_path / "plain.gguf", "Q2_K").parent == paths.models_cache_dir()
    assert quantize.requantize_warning("F16", "m.gguf", "Q8_0") == ""
    assert "cannot exceed" in quantize.requantize_warning("Q4_K_M", "m.gguf", "Q8_0")


def test_quantize_refuses_to_overwrite_the_source(tmp_path):
    src = tmp_path / "m.Q4_1.gguf"
    src.symlink_to(smollm2_path())
    with pytest.raises(ModelFileError, match="overwrite the source"):
        quantize.quantize(src, "Q4_1", tmp_path)


def test_quantize_invalid_source(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 1) + b"\0" * 32)
    with pytest.raises(ModelFileError, match="GGUF version 1"):
        quantize.quantize(bad, "Q8_0", tmp_path)


def test_llama_cpp_failure_stays_in_the_child(tmp_path, capfd):
    # a valid header llama.cpp cannot quantize: no architecture keys, one tiny tensor
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b

    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    tensor = s(b"blk.0.w") + struct.pack("<IQIQ", 1, 32, 0, 0)
    body = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + tensor
    src = tmp_path / "tiny.gguf"
    src.write_bytes(body + b"\0" * (-len(body) % 32) + b"\0" * 128)
    with pytest.raises(EngineError, match="quantizing .* failed") as info:
        quantize.quantize(src, "Q8_0", tmp_path / "out")
    assert "quantize.log" in str(info.value)
    assert not (tmp_path / "out" / "tiny.Q8_0.gguf").exists()
    captured = capfd.readouterr()
    assert "llama" not in captured.err  # llama.cpp wrote to the child's log, not our stderr


def test_quantize_timeout_kills_the_child(tmp_path):
    with pytest.raises(EngineError, match="took longer than 0.2 s"):
        quantize.quantize(smollm2_path(), "Q8_0", tmp_path, timeout=0.2)
    assert list(tmp_path.iterdir()) == []  # no partial file left


def test_quantize_command_into_the_cache(capsys):
    assert quantize_cmd(smollm2_path(), ["q4_0"]) == 0
    captured = capsys.readouterr()
    target = paths.models_cache_dir() / "SmolLM2-135M-Instruct.Q4_0.gguf"
    assert str(target) in captured.out and target.is_file()
    assert "cannot exceed the source" in captured.err
    with pytest.raises(EngineError, match="unknown quantization type"):
        quantize_cmd(smollm2_path(), ["Q8_0", "nope"])  # refused before any work
    # discovery lists it from the cache, the bundled model, and a bad file in a folder
    bad_dir = paths.cache_dir() / "elsewhere"
    bad_dir.mkdir()
    (bad_dir / "broken.gguf").write_bytes(b"<html>not found</html>")
    entries = discovery.discover([bad_dir])
    by_source = {(e.source, e.quant or e.error[:5]) for e in entries}
    assert ("bundled", "Q4_1") in by_source and ("cache", "Q4_0") in by_source
    broken = next(e for e in entries if e.path.endswith("broken.gguf"))
    assert not broken.ok and "HTML page" in broken.error
    assert models_cmd([bad_dir], as_json=True) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(entries)
    assert models_cmd([bad_dir]) == 0
    assert "! " in capsys.readouterr().out
    with pytest.raises(ModelFileError, match="does not exist"):
        discovery.discover([bad_dir / "missing"])


def test_quality_math():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 11)).astype(np.float32)
    lp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ids = [0, 1, 2, 3, 4, 5]
    agree, kl, ppl = compare.quality(lp, lp, ids)
    assert agree == 1.0 and kl == 0.0
    assert ppl == pytest.approx(np.exp(-np.mean([lp[i, ids[i + 1]] for i in range(5)])))
    flat = np.full_like(lp, -np.log(11))
    _, kl_flat, ppl_flat = compare.quality(lp, flat, ids)
    p = np.exp(lp.astype(np.float64))
    assert kl_flat == pytest.approx(np.mean(np.sum(p * (lp - flat), axis=1)), rel=1e-5)
    assert ppl_flat == pytest.approx(11.0, rel=1e-5)


def test_compare_three_files(quantized, capsys):
    files = [str(smollm2_path()), quantized["Q8_0"].output, quantized["Q2_K"].output]
    t0 = time.perf_counter()
    # one thread: on a shared 2-core box llama.cpp's spinning threads slow down 3-6x when
    # another process is busy (measured: 51 s with 2 threads vs 16 s with 1 under load 5)
    result = compare.compare(files, tokens=16, n_threads=1)
    wall = (
        time.perf_counter() - t0
    )  # shown, not bounded: a busy machine takes several times as long
    print(f"\ncompare of 3 files took {wall:.1f} s\n{compare_format.format_table(result)}")
    runs = {r.quant: r for r in result.runs}
    assert [r.path for r in result.runs] == files
    assert result.reference == quantized["Q8_0"].output  # the largest file
    assert max(result.runs, key=lambda r: r.size_bytes).quant == "Q8_0"
    ref = runs["Q8_0"]
    assert ref.is_reference and ref.top1_agreement == 1.0 and ref.mean_kl < 1e-6
    assert ref.same_prefix_tokens == 16
    assert runs["Q2_K"].top1_agreement == min(r.top1_agreement for r in result.runs)
    assert runs["Q2_K"].mean_kl > runs["Q4_1"].mean_kl > 0
    assert runs["Q2_K"].perplexity > ref.perplexity
    assert 150 <= result.text_tokens <= 250
    for r in result.runs:
        assert not r.error
        assert r.completion_tokens == 16 and r.decode_tps and r.decode_tps > 0
        assert r.ttft_s and r.ttft_s > 0 and r.prefill_tps and r.load_s and r.load_s > 0
        assert r.peak_rss_bytes and r.peak_rss_bytes > r.size_bytes * 0.5
    # saved, and readable back
    saved = compare_runs.load_result(result.saved_to)
    assert saved.runs == result.runs
    assert result.saved_to.startswith(str(paths.cache_dir() / "compare"))
    # the formats
    table = compare_format.format_table(result)
    assert "top-1 agreement" in table and "█" in table
    csv_text = compare_format.to_csv(result)
    assert csv_text.count("\n") == 4 and csv_text.startswith("path,name,quant")
    md = compare_format.to_markdown(result)
    assert md.splitlines()[1].startswith("|---|---|---:|") and md.count("\n") == 4
    assert json.loads(compare_format.to_json(result))["reference"] == result.reference


def test_compare_command_and_a_bad_file(quantized, tmp_path, capsys):
    with pytest.raises(EngineError, match="at least two"):
        compare_cmd([str(smollm2_path())])
    with pytest.raises(EngineError, match="unknown format"):
        compare_cmd([str(smollm2_path()), quantized["Q2_K"].output], fmt="xml")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"")
    with pytest.raises(ModelFileError, match="it is empty"):  # every file is checked first
        compare_cmd([str(smollm2_path()), str(bad)])
    code = compare_cmd(
        [quantized["Q2_K"].output],
        tokens=4,
        reference=str(smollm2_path()),
        fmt="markdown",
        prompt="Name three colours.",
        options=LoadOptions(model_path="", n_threads=1),
    )
    assert code == 0
    out = capsys.readouterr()
    assert out.out.startswith("| file |") and "saved to" in out.err


def test_compare_with_a_fake_engine(tmp_path):
    names = ["ref.gguf", "same.gguf", "noisy.gguf", "othertok.gguf", "broken.gguf"]
    for name in names:
        (tmp_path / name).symlink_to(smollm2_path())
    files = [str(tmp_path / n) for n in names[1:]]
    result = compare.compare(
        files, tokens=5, reference=tmp_path / "ref.gguf", make_engine=FakeEngine, save=False
    )
    runs = {Path(r.path).name: r for r in result.runs}
    assert list(runs) == names  # the reference first, given outside the list
    assert runs["ref.gguf"].is_reference and runs["same.gguf"].mean_kl == pytest.approx(0)
    assert runs["same.gguf"].top1_agreement == 1.0 and runs["same.gguf"].same_prefix_tokens == 5
    assert runs["noisy.gguf"].top1_agreement < 1.0 and runs["noisy.gguf"].mean_kl > 0.1
    assert runs["noisy.gguf"].same_prefix_tokens == 2
    assert (
        runs["othertok.gguf"].top1_agreement is None and "tokenizer" in runs["othertok.gguf"].note
    )
    assert runs["othertok.gguf"].perplexity > 0
    assert "could not load" in runs["broken.gguf"].error
    assert result.saved_to == ""
    table = compare_format.format_table(result)
    assert "! broken.gguf: could not load" in table and "! othertok.gguf" in table
    assert "-" in compare_format.to_markdown(result).splitlines()[-1]  # missing figures shown as -


def _orphan_spinner() -> int:
    """A process spinning on a core that is not this one's child (its parent shell exits):
    another program, as far as the measurement can tell."""
    import subprocess
    import sys

    out = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


class _DisturbedEngine(FakeEngine):
    """The fake engine with a thread per core; the file named busy.gguf replies while another
    program spins on a core (the fake's own 1 thread would leave it a core of its own)."""

    def start(self):
        from dataclasses import replace

        from chatapp.cpus import usable_cpus

        return replace(super().start(), n_threads=usable_cpus())

    def generate(self, request):
        import os
        import signal
        import time

        if "busy" not in self.path:
            yield from super().generate(request)
            return
        pid = _orphan_spinner()
        try:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                time.sleep(0.05)  # the reply takes a second, and this process idles meanwhile
            yield from super().generate(request)
        finally:
            os.kill(pid, signal.SIGKILL)


def test_compare_marks_a_file_whose_speed_was_measured_beside_a_busy_program(tmp_path):
    names = ["ref.gguf", "busy.gguf", "quiet.gguf"]
    for name in names:
        (tmp_path / name).symlink_to(smollm2_path())
    result = compare.compare(
        [str(tmp_path / n) for n in names],
        tokens=5,
        reference=tmp_path / "ref.gguf",
        make_engine=_DisturbedEngine,
        save=False,
    )
    runs = {Path(r.path).name: r for r in result.runs}
    busy = runs["busy.gguf"]
    assert busy.disturbed and busy.busy_share > 0  # a core taken from the run's threads
    assert "busy.gguf's speed was measured while other programs used" in busy.note
    table = compare_format.format_table(result)
    busy_row = next(line for line in table.splitlines() if line.startswith("busy.gguf"))
    assert "*" in busy_row  # its speed cells are marked in the table itself
    assert "! busy.gguf: busy.gguf's speed was measured" in table
