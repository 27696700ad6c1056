"""llama.cpp's extra CPU buffers (AMX, repacking) crashing on the first compute: the engine
starts again without them, says so in one line, remembers it; crash notices name the cause."""

from __future__ import annotations

import json
import signal

import pytest

from chatapp import machine, paths
from chatapp.engine.local.load import cpu_backend
from chatapp.engine.local.load.cpu_backend import CPU_FAULT_ENV
from chatapp.engine.local.load.llama_open import exact_batches_possible
from chatapp.engine.local.load.worker_log import extra_buffers_from_log, useful_lines
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import EngineCrashed, LoadOptions
from chatapp.models import quantize
from chatapp.models.bundled import smollm2_path


@pytest.fixture(scope="module")
def repacked_model(tmp_path_factory) -> str:
    """Q4_0: llama.cpp repacks its weights into CPU_REPACK buffers on AVX2/AVX-512 and NEON."""
    out = tmp_path_factory.mktemp("q4_0")
    return quantize.quantize(smollm2_path(), "Q4_0", out, nthread=2).output


def _options(path: str, **kw) -> LoadOptions:
    return LoadOptions(model_path=path, n_ctx=256, n_gpu_layers=0, **kw)


@pytest.mark.slow
def test_a_crash_in_warm_up_restarts_without_extra_buffers_and_remembers(
    repacked_model, fresh_dirs, monkeypatch
):
    probe = LocalEngine(_options(repacked_model))
    try:
        info = probe.start()
        if probe.notes:  # this CPU's extra buffers crash for real (AMX): the fallback just ran
            _check_fallback(probe, info, machine.repack_crashes(), "SIGSEGV")
            return _check_remembered(repacked_model)
    finally:
        probe.close()
    probed = info.extra_buffers
    if not probed:
        pytest.skip("llama.cpp uses no extra CPU buffer for Q4_0 on this CPU")
    monkeypatch.setenv(CPU_FAULT_ENV, "SIGSEGV")  # crashes only while extra buffers are on
    engine = LocalEngine(_options(repacked_model))
    try:
        info = engine.start()
        _check_fallback(engine, info, cpu_backend.backend_name(probed), "SIGSEGV")
    finally:
        engine.close()
    _check_remembered(repacked_model)


def _check_fallback(engine: LocalEngine, info, name: str, signal_name: str) -> None:
    """The worker runs without extra buffers, said so in one line, remembered it, replies."""
    assert name in ("AMX", "CPU_REPACK")
    assert engine.alive and info.repack is False and info.extra_buffers == ()
    assert engine.notes == [
        f"llama.cpp's {name} path crashed on this CPU ({signal_name}); running without it"
        " (remembered for this machine; --repack tries it again)"
    ]
    assert machine.repack_crashes() == name
    saved = json.loads((paths.cache_dir() / machine.MEMORY_FILE).read_text())
    (entry,) = saved.values()
    assert entry["repack_crash"] == machine.repack_crashes()
    reply = "".join(
        e.text for e in engine.generate(_hello()) if hasattr(e, "text") and hasattr(e, "id")
    )
    assert reply.strip(), "the restarted worker writes a reply"


def _check_remembered(path: str) -> None:
    again = LocalEngine(_options(path))
    try:
        info = again.start()  # straight to the remembered choice: no crash, no notice
        assert info.repack is False and again.notes == []
    finally:
        again.close()


@pytest.mark.slow
def test_a_crash_in_the_first_reply_names_the_cause_and_the_next_start_avoids_it(
    repacked_model, fresh_dirs, monkeypatch
):
    monkeypatch.setenv(CPU_FAULT_ENV, "SIGSEGV@reply")
    engine = LocalEngine(_options(repacked_model))
    info = engine.start()
    if not info.extra_buffers:
        engine.close()
        pytest.skip("llama.cpp uses no extra CPU buffer for Q4_0 on this CPU")
    name = cpu_backend.backend_name(info.extra_buffers)
    with pytest.raises(EngineCrashed) as caught:
        list(engine.generate(_hello()))
    message = str(caught.value)
    assert message.startswith("the model worker died while writing a reply (signal SIGSEGV): ")
    assert f"llama.cpp's {name} path crashed on this CPU (SIGSEGV); it will run without it" in (
        message
    )
    assert machine.repack_crashes() == name
    info = engine.start()  # what the app does next ("start it again")
    try:
        assert info.repack is False and info.extra_buffers == ()
        assert any(hasattr(e, "id") for e in engine.generate(_hello()))
    finally:
        engine.close()


@pytest.mark.slow
def test_repack_asked_for_by_hand_is_not_overridden(repacked_model, fresh_dirs, monkeypatch):
    monkeypatch.setenv(CPU_FAULT_ENV, "SIGSEGV")
    engine = LocalEngine(_options(repacked_model, repack=True))
    with pytest.raises(EngineCrashed) as caught:
        engine.start()
    engine.close()
    message = str(caught.value)
    if "--no-repack" not in message:
        pytest.skip("llama.cpp uses no extra CPU buffer for Q4_0 on this CPU")
    assert "warming up" in message and "(signal SIGSEGV)" in message
    assert "path crashed (SIGSEGV); try --no-repack" in message
    assert "model buffer size" in caught.value.log_tail
    assert machine.repack_crashes() == ""


@pytest.mark.slow
def test_sigill_names_a_missing_instruction_and_the_rebuild(model_path, fresh_dirs, monkeypatch):
    monkeypatch.setenv(CPU_FAULT_ENV, "SIGILL:always")
    engine = LocalEngine(_options(model_path))
    with pytest.raises(EngineCrashed) as caught:
        engine.start()
    engine.close()
    message = str(caught.value)
    assert "(signal SIGILL)" in message
    assert "an instruction this CPU lacks" in message
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install' in message
    assert "chat_template" not in caught.value.log_tail


def test_useful_lines_skip_the_metadata_dump_and_keep_the_buffer_types():
    log = "\n".join(
        [
            "llama_model_loader: - kv  30: tokenizer.chat_template str = {% for m in messages %}",
            "{{ '<|im_start|>' + m['role'] }}",
            "{% endfor %}",
            "load_tensors:          AMX model buffer size =    50.00 MiB",
            "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB",
            *[f"llama_context: line {i}" for i in range(20)],
            "graph_reserve: reserving a graph for ubatch with n_tokens = 512",
        ]
    )
    shown = useful_lines(log, lines=4).splitlines()
    assert shown[0].startswith("load_tensors:          AMX model buffer size")
    assert shown[-1].startswith("graph_reserve:")
    assert not any("im_start" in line or "endfor" in line for line in shown)
    assert extra_buffers_from_log(log) == ("AMX",)
    assert cpu_backend.backend_name(("CPU_REPACK", "AMX")) == "AMX"


def test_tuned_settings_fill_only_what_was_not_given(model_path, fresh_dirs):
    machine.remember_tuned(
        model_path, {"threads": 1, "flash_attn": True, "repack": False, "n_gpu_layers": 0}
    )
    chosen, tuned = cpu_backend.choose(_options(model_path))
    assert tuned and (chosen.n_threads, chosen.flash_attn, chosen.repack) == (1, True, False)
    # Exact batches hold flash attention on (llama_open.exact_attention): the tune's choice
    # of it waits, the rest applies
    exact, tuned = cpu_backend.choose(_options(model_path, exact_batches=True))
    assert tuned and (exact.n_threads, exact.flash_attn, exact.repack) == (1, None, False)
    given, _ = cpu_backend.choose(_options(model_path, n_threads=2, flash_attn=False))
    assert (given.n_threads, given.flash_attn, given.repack) == (2, False, False)
    other_layers, tuned = cpu_backend.choose(LoadOptions(model_path=model_path, n_gpu_layers=-1))
    assert not tuned and other_layers.flash_attn is None, "tuned on the CPU, not for the GPU"


def test_a_tune_that_turned_flash_attention_off_leaves_exact_batches_possible(
    model_path, fresh_dirs
):
    """Off on the CPU is what None loads; kept None, it is not taken for the user's
    --no-flash-attn, which rules exact batches out (llama_open.exact_batches_possible)."""
    machine.remember_tuned(
        model_path, {"threads": 1, "flash_attn": False, "repack": False, "n_gpu_layers": 0}
    )
    chosen, tuned = cpu_backend.choose(_options(model_path))
    assert tuned and (chosen.n_threads, chosen.flash_attn) == (1, None)
    assert exact_batches_possible(chosen, offload=False)
    pinned, _ = cpu_backend.choose(_options(model_path, exact_batches=False))
    assert pinned.flash_attn is False  # exact batches ruled out: the tune's word as it was
    given, _ = cpu_backend.choose(_options(model_path, flash_attn=False))
    assert not exact_batches_possible(given, offload=False)


def test_a_tune_on_a_build_without_offload_holds_for_any_layer_count(model_path, fresh_dirs):
    """Without GPU offload every layer count runs on the CPU: a tune saved with the default
    (-1) applies to --ngl 0 too, and the other way round; a build that offloads keeps them
    apart. (Before, --ngl 0 on a CPU-only build tuned again and replaced the default's tune.)"""
    saved = {"threads": 1, "flash_attn": True, "repack": False, "n_gpu_layers": -1}
    machine.remember_tuned(model_path, {**saved, "gpu_offload": False})
    for layers in (0, -1, 12):
        chosen, tuned = cpu_backend.choose(LoadOptions(model_path, n_gpu_layers=layers))
        assert tuned and chosen.flash_attn is True and chosen.n_threads == 1
    machine.remember_tuned(model_path, {**saved, "gpu_offload": True})
    chosen, tuned = cpu_backend.choose(LoadOptions(model_path, n_gpu_layers=0))
    assert not tuned and chosen.flash_attn is None


def _hello():
    from chatapp.engine.protocol import ChatMessage, GenerateRequest
    from chatapp.sampling import SamplerSettings

    return GenerateRequest(
        messages=(ChatMessage("user", "Say hi."),),
        settings=SamplerSettings(temperature=0.0, max_tokens=8),
    )


def test_which_crashes_are_retried_without_extra_buffers():
    retry = cpu_backend.retry_without_buffers
    assert retry(signal.SIGSEGV, ("AMX",), True, False)
    assert retry(signal.SIGBUS, ("CPU_REPACK",), True, False)
    assert retry(signal.SIGILL, ("AMX",), True, False), (
        "AMX tiles fault as SIGILL (llama-bench here)"
    )
    assert not retry(signal.SIGILL, ("CPU_REPACK",), True, False), "a build for another CPU"
    assert not retry(signal.SIGSEGV, (), True, False), "no extra buffers: not theirs"
    assert not retry(signal.SIGSEGV, ("AMX",), False, False), "already off"
    assert not retry(signal.SIGSEGV, ("AMX",), True, True), "asked for by hand"
    assert not retry(None, ("AMX",), True, False)
    amx = cpu_backend.crash_cause(signal.SIGILL, ("AMX",), True)
    assert "AMX path crashed (SIGILL); try --no-repack" in amx
    assert "instruction this CPU lacks" in cpu_backend.crash_cause(
        signal.SIGILL, ("CPU_REPACK",), True
    )
