"""Memory fit: hand computations from the bundled model's header, llama.cpp's own sizes, what-if."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from chatapp import machine
from chatapp.commands.models import fit_cmd, inspect_cmd
from chatapp.engine.protocol import EngineError, LoadOptions
from chatapp.errors import ModelFileError
from chatapp.gguf.header import inspect, read_header
from chatapp.machine import ram_available
from chatapp.models import fit
from chatapp.models.bundled import smollm2_path

MIB = 1024**2
GIB = 1024**3


@pytest.fixture(scope="module")
def shape():
    return fit.shape_from_header(read_header(smollm2_path()))


def test_kv_cache_by_hand(shape):
    card = inspect(smollm2_path())
    for ctx in (512, 2048, 4096, 8192):
        by_hand = 2 * 30 * ctx * 3 * 64 * 2  # K and V x layers x ctx x KV heads x head dim x f16
        from_card = 2 * card.n_layers * ctx * card.n_kv_heads * card.head_dim * 2
        assert fit.estimate(shape, ctx).kv_bytes == by_hand == from_card
    assert fit.estimate(shape, 4096).kv_bytes == 94_371_840  # 90 MiB
    assert fit.estimate(shape, 4096, cache_type="q8_0").kv_bytes == 94_371_840 * 34 // 64


def test_weights_by_hand(shape):
    h = read_header(smollm2_path())
    data_section = h.file_size - h.data_offset
    assert shape.weights_bytes == inspect(smollm2_path()).weights_bytes
    # tensor data fills the file after the header, up to alignment padding per tensor
    assert 0 <= data_section - shape.weights_bytes < h.alignment * len(h.tensors)
    # token_embd is Q8_0: 576 x 49152 / 32 blocks x 34 bytes; it is tied, so the GPU gets a copy
    assert shape.output_copy_bytes == 576 * 49152 // 32 * 34
    # one layer: 7 Q4_1 matrices (20 bytes per 32) + 2 F32 norms
    q4_1 = (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3) // 32 * 20
    assert shape.layer_bytes[0] == q4_1 + 2 * 576 * 4
    assert len(shape.layer_bytes) == 30 and len(set(shape.layer_bytes)) == 1


def test_totals_add_up(shape):
    cpu = fit.estimate(shape, 4096, n_gpu_layers=0)
    assert cpu.gpu_bytes == 0
    assert cpu.ram_bytes == cpu.weights_bytes + cpu.kv_bytes + cpu.compute_bytes
    full = fit.estimate(shape, 4096, n_gpu_layers=-1)
    assert full.n_gpu_layers == 31
    # all layers, the output head (a copy of token_embd), the KV cache and compute on the GPU
    assert full.gpu_bytes == (
        sum(shape.layer_bytes) + shape.output_bytes + full.kv_bytes + full.compute_bytes
    )
    half = fit.estimate(shape, 4096, n_gpu_layers=15)
    assert half.gpu_bytes == sum(shape.layer_bytes[15:]) + half.kv_bytes // 2 + half.compute_bytes
    assert cpu.ram_bytes > half.ram_bytes > full.ram_bytes


def test_gpu_layers_that_fit(shape):
    assert fit.max_gpu_layers(shape, 4096, 80 * GIB) == 31
    assert fit.max_gpu_layers(shape, 4096, 100 * MIB) == 0
    counts = [fit.max_gpu_layers(shape, 4096, fit.GPU_RESERVE + m * MIB) for m in range(0, 400, 20)]
    assert counts == sorted(counts) and counts[-1] == 31
    report = fit.fit_report(shape, 4096, -1, gpu_free=fit.GPU_RESERVE + 150 * MIB, ram_free=GIB)
    assert 0 < report.gpu_layers_fit < 31
    assert f"use --ngl {report.gpu_layers_fit}" in report.verdict


@pytest.mark.slow
def test_sizes_llama_cpp_reports(shape):
    """The estimate against the KV and compute buffer sizes llama.cpp logs when it loads."""
    from chatapp.engine.local.process.local_engine import LocalEngine

    ctx = 2048
    # fit.estimate's default models llama.cpp without flash attention.
    opts = LoadOptions(
        str(smollm2_path()), n_ctx=ctx, n_gpu_layers=0, n_threads=2, flash_attn=False
    )
    engine = LocalEngine(opts)
    engine.start()
    engine.close()
    log = engine.log.text()  # the whole load (~200 KiB): log_tail() keeps a few lines
    kv = float(re.findall(r"KV buffer size = +([\d.]+) MiB", log)[-1])
    compute = float(re.findall(r"compute buffer size = +([\d.]+) MiB", log)[-1])
    est = fit.estimate(shape, ctx)
    assert est.kv_bytes / MIB == pytest.approx(kv, abs=0.01)
    assert est.compute_bytes / MIB == pytest.approx(compute, rel=0.03)


def test_compute_buffer_calibration(shape):
    # sizes llama.cpp 0.3.36 logged for this model (ubatch 512 unless given)
    measured = {
        (1024, 512, False): 98.25,
        (4096, 512, False): 99.38,
        (8192, 512, False): 166.38,
        (8192, 512, True): 98.25,
        (2048, 128, False): 24.84,
    }
    for (ctx, ub, fa), mib in measured.items():
        got = fit.compute_buffer_bytes(shape, ctx, ub, fa) / MIB
        assert got == pytest.approx(mib, rel=0.03), (ctx, ub, fa)


def test_what_if_70b_in_48gb():
    ref, rows = fit.what_if(70, 48 * GIB, n_ctx=4096)
    assert ref == "Llama-3.1-70B"
    fits = {r.quant: r.fits for r in rows}
    assert fits == {
        "F16": False,
        "Q8_0": False,
        "Q6_K": False,
        "Q5_K_M": False,
        "Q4_K_M": True,
        "Q3_K_M": True,
        "Q2_K": True,
    }
    q4 = next(r for r in rows if r.quant == "Q4_K_M")
    assert q4.weights_bytes == int(70e9 * 4.89 / 8)
    assert q4.kv_bytes == 2 * 80 * 4096 * 8 * 128 * 2
    assert rows == sorted(rows, key=lambda r: -r.total_bytes)
    text = fit.format_what_if(70, 48 * GIB, ref, rows, 4096)
    assert "Q4_K_M" in text and "yes" in text
    with pytest.raises(ValueError):
        fit.what_if(0, GIB)


def test_what_if_small_model_everything_fits():
    _, rows = fit.what_if(1, 24 * GIB)
    assert all(r.fits for r in rows)


def test_parse_nvidia_smi():
    text = "0, NVIDIA H200, 143771, 143000\n1, NVIDIA RTX A6000, 49140, 1024\n\nbad line\n"
    gpus = fit.parse_nvidia_smi(text)
    assert [g.name for g in gpus] == ["NVIDIA H200", "NVIDIA RTX A6000"]
    assert gpus[0].free_bytes == 143000 * MIB and gpus[1].total_bytes == 49140 * MIB


def test_gpu_memory_without_and_with_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert fit.gpu_memory() == []
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, Fake GPU, 24576, 20000'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert fit.gpu_memory() == [fit.GpuMemory(0, "Fake GPU", 24576 * MIB, 20000 * MIB)]
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert fit.gpu_memory() == []


def test_free_ram_is_psutil_s_available_memory(monkeypatch):
    from collections import namedtuple

    assert ram_available() > 0
    memory = namedtuple("memory", "total available")
    monkeypatch.setattr(machine.psutil, "virtual_memory", lambda: memory(24 * GIB, 20 * GIB))
    assert ram_available() == 20 * GIB


def test_free_ram_is_known_without_proc_meminfo(monkeypatch):
    """The bug: free RAM was read from /proc/meminfo only, so on macOS and Windows the fit
    check showed it as unknown. Here /proc cannot be read the way the old code read it."""
    real = Path.read_text

    def no_proc(self, *args, **kwargs):
        if str(self).startswith("/proc"):
            raise FileNotFoundError(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", no_proc)
    assert ram_available() > 0


def test_psutil_failing_gives_unknown_free_ram(monkeypatch):
    def broken():
        raise RuntimeError("no memory statistics here")

    monkeypatch.setattr(machine.psutil, "virtual_memory", broken)
    assert ram_available() is None


def test_fit_command(capsys, monkeypatch):
    monkeypatch.setattr(fit, "gpu_memory", lambda: [])
    assert fit_cmd(None, 4096) == 0
    out = capsys.readouterr().out
    assert "KV cache     90.0 MiB" in out and "it fits" in out
    assert fit_cmd(None, 4096, memory_gb=0.7, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert 0 < data["fit"]["gpu_layers_fit"] < 31
    assert fit_cmd(params_b=70, memory_gb=48) == 0
    assert "Q4_K_M" in capsys.readouterr().out
    with pytest.raises(EngineError, match="--memory"):
        fit_cmd(params_b=70, memory_gb=-1)
    with pytest.raises(ModelFileError, match="not found"):
        fit_cmd("/nonexistent/model.gguf")


def test_inspect_command(capsys):
    assert inspect_cmd(smollm2_path(), 2048) == 0
    out = capsys.readouterr().out
    assert "Q4_1" in out and "49,152" in out and "chat template   yes" in out
    assert inspect_cmd(smollm2_path(), as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["card"]["n_layers"] == 30 and data["fit"]["estimate"]["n_ctx"] == 4096
