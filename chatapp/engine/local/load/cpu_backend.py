"""Load choices that depend on this CPU: tuned settings, the extra-buffer fallback, crash causes."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace

from chatapp import machine
from chatapp.cpus import usable_cpus
from chatapp.engine.protocol import LoadOptions

CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGILL, signal.SIGBUS)
NATIVE_OFF_BUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir '
    "'llama-cpp-python==0.3.36'"
)


def choose(options: LoadOptions) -> tuple[LoadOptions, bool]:
    """Fill what the user left open (threads, flash attention, repack) from this machine:
    `chatapp tune`'s best for the file, and extra buffers off where they crashed here.

    Flash attention left open stays None: the worker turns it on on the CPU where
    `exact_batches` asks (llama_open.exact_attention), else off there (decode is faster
    without it: tune measures it), and leaves llama.cpp's auto with GPU layers.
    Returns the options and whether a tune's result was used."""
    best = machine.tuned(options.model_path)
    changes: dict = {}
    if options.n_threads is not None:
        changes["adapt_threads"] = False  # the user's count (--threads, config) is kept
    if best and runs_as_tuned(best, options):
        if options.n_threads is None and isinstance(best.get("threads"), int):
            # Tuned with the whole machine; this process may have fewer CPUs (taskset, a
            # container's quota): never more threads than it can run at once.
            changes["n_threads"] = max(1, min(best["threads"], usable_cpus()))
        exact = options.exact_batches  # (it needs flash attention: the tune's choice waits)
        if options.flash_attn is None and not exact and isinstance(best.get("flash_attn"), bool):
            # Off on the CPU stays None: the same load, and not the user's word, so a reply
            # with drafts may still turn exact batches on (llama_open.exact_batches_possible)
            cpu = options.n_gpu_layers == 0 or best.get("gpu_offload") is False
            off_on_cpu = cpu and exact is None and not best["flash_attn"]
            changes["flash_attn"] = None if off_on_cpu else best["flash_attn"]
        if options.repack is None and isinstance(best.get("repack"), bool):
            changes["repack"] = best["repack"]
    tuned = bool(changes)
    if options.repack is None and changes.get("repack") is not False:
        changes["repack"] = not machine.repack_crashes()
    return replace(options, **changes), tuned


def runs_as_tuned(best: dict, options: LoadOptions) -> bool:
    """Whether a saved tune was measured as these options will run: with the same GPU layers,
    or with any on a build that offloads none (the machine key names the build, so the tune
    of a CPU-only build never reaches a GPU one: `--ngl 0` and the default -1 are one run)."""
    return best.get("n_gpu_layers") == options.n_gpu_layers or best.get("gpu_offload") is False


def crash_signal(exitcode: int | None) -> signal.Signals | None:
    """The signal that killed a worker, when it is one a CPU backend fault gives."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        sig = signal.Signals(-exitcode)
    except ValueError:
        return None
    return sig if sig in CRASH_SIGNALS else None


def retry_without_buffers(
    sig: signal.Signals | None, buffers: tuple[str, ...], repack_on: bool, asked_for: bool
) -> bool:
    """Whether a worker that died on its first compute is worth starting again with the extra
    CPU buffers off: it died of a CPU fault while llama.cpp used them, and the user did not ask
    for them. A SIGILL counts only with AMX buffers (its tile instructions fault that way where
    the kernel does not enable them); otherwise it means a build for another CPU."""
    if sig is None or not buffers or not repack_on or asked_for:
        return False
    return sig is not signal.SIGILL or "AMX" in buffers


def backend_name(buffers: tuple[str, ...]) -> str:
    """How to name the extra buffer path in a sentence: AMX first, it is the known crasher."""
    if "AMX" in buffers:
        return "AMX"
    return buffers[0] if buffers else "extra CPU buffer"


def fallback_notice(buffers: tuple[str, ...], sig: signal.Signals, now: bool = True) -> str:
    """One line saying the extra buffers crashed and are off from now (or from the next start)."""
    then = "running without it" if now else "it will run without it"
    return (
        f"llama.cpp's {backend_name(buffers)} path crashed on this CPU ({sig.name}); "
        f"{then} (remembered for this machine; --repack tries it again)"
    )


def crash_cause(sig: signal.Signals | None, buffers: tuple[str, ...], repack: bool) -> str:
    """A clause naming what most likely killed the worker, and what to do ('' if unknown)."""
    if sig is signal.SIGILL and not ("AMX" in buffers and repack):
        return (
            "llama.cpp used an instruction this CPU lacks (its build targets another CPU); "
            f"rebuild it for this one: {NATIVE_OFF_BUILD}"
        )
    if sig is not None and buffers and repack:
        return (
            f"llama.cpp's {backend_name(buffers)} path crashed ({sig.name}); "
            "try --no-repack (or repack = false in config.toml)"
        )
    return ""


CPU_FAULT_ENV = "CHATAPP_FAULT_CPU_BACKEND"


def inject_cpu_fault(options: LoadOptions, where: str) -> None:
    """Fault injection for tests, standing in for llama.cpp's AMX crash on some CPUs:
    CHATAPP_FAULT_CPU_BACKEND=SIGSEGV kills the worker with that signal in warm-up while extra
    CPU buffers are on; "SIGSEGV@reply" does it in the first reply's prefill instead;
    "SIGILL:always" whatever the buffers."""
    value = os.environ.get(CPU_FAULT_ENV, "")
    value, _, at = value.partition("@")
    name, _, when = value.partition(":")
    if not name or (at or "warm_up") != where:
        return
    if when == "always" or options.repack is not False:
        sys.stderr.flush()
        signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.kill(os.getpid(), getattr(signal, name))
