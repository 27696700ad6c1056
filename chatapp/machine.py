"""This machine and llama.cpp build as a key, and the load choices remembered for that pair."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import platform
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import psutil

from chatapp import cpus, jsonfile, paths

MEMORY_FILE = "machine.json"


def _cpuinfo() -> str:
    """/proc/cpuinfo's text ("" where it is absent). Read only for the CPU's model name and
    feature flags: psutil has no API for either (platform.processor() says "x86_64" on Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def ram_available() -> int | None:
    """Bytes of RAM that can be used without swapping (psutil: Linux's MemAvailable, macOS's
    and Windows' own figure); None where psutil cannot say."""
    try:
        return int(psutil.virtual_memory().available)
    except (psutil.Error, OSError, RuntimeError):
        return None


@cache
def cpu_name() -> str:
    """The CPU's model name (e.g. "Intel(R) Xeon(R) Platinum 8481C")."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them (empty where /proc is absent)."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@cache
def machine_key() -> str:
    """CPU model, its flags and the machine's logical CPUs: what a tuned choice depends on. The
    machine's count, not the CPUs this process may use (usable_cpus): the key names the
    hardware, and a tuned count is capped to the usable CPUs where it is applied."""
    flags = hashlib.sha1(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:10]
    return f"{cpu_name()} | {cpus.machine_cpus()} cpus | flags {flags}"


def _lib_dirs() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    return [Path(w) / "lib" for w in (spec.submodule_search_locations or [])] if spec else []


def libs_identity(lib_dirs: list[Path]) -> str:
    """The shared libraries by name and size: which backends were built (ggml-cuda, -metal,
    -cpu variants) and with what, as far as sizes tell. Not their times: a reinstall of the
    same build (pip's cached wheel) is the same build."""
    parts = []
    for lib in lib_dirs:
        files = sorted(lib.glob("*.so*")) + sorted(lib.glob("*.dylib")) if lib.is_dir() else []
        parts += [f"{so.name}:{so.stat().st_size}" for so in files if not so.is_symlink()]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:10]


@cache
def build_key() -> str:
    """llama-cpp-python's version plus its shared libraries' names and sizes: a rebuild with
    CUDA, or of another llama.cpp, is another build. Found without importing llama_cpp."""
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return f"llama-cpp-python {version} | libs {libs_identity(_lib_dirs())}"


def _memory_path() -> Path:
    return paths.cache_dir() / MEMORY_FILE


def _entry_key() -> str:
    return f"{machine_key()} || {build_key()}"


def recall() -> dict[str, Any]:
    """What is remembered for this machine and llama.cpp build ({} when nothing is; a broken
    machine.json is kept aside, never overwritten)."""
    entry = jsonfile.read_dict(_memory_path()).get(_entry_key(), {})
    return entry if isinstance(entry, dict) else {}


def _update_entry(change: Callable[[dict[str, Any]], None]) -> None:
    """Change this machine and build's entry under the file's lock (another process's saves
    are kept), atomically; best effort."""

    def apply(data: dict[str, Any]) -> None:
        key = _entry_key()
        found = data.get(key)
        entry: dict[str, Any] = found if isinstance(found, dict) else {}
        change(entry)
        data[key] = entry

    try:
        jsonfile.update(_memory_path(), apply)
    except (OSError, jsonfile.JsonFileError):
        pass  # the next start finds out again


def remember(**values: Any) -> None:
    """Merge values into this machine and build's entry."""
    _update_entry(lambda entry: entry.update(values))


def _remember_for_file(field: str, model_path: str, value: Any) -> None:
    """Set one file's value in a per-file table of the entry (such as "tuned")."""
    key = file_key(model_path)

    def change(entry: dict[str, Any]) -> None:
        found = entry.get(field)
        table: dict[str, Any] = found if isinstance(found, dict) else {}
        entry[field] = {**table, key: value}

    _update_entry(change)


def repack_crashes() -> str:
    """The extra buffer type that crashed llama.cpp here ("AMX", "CPU_REPACK"), or ""."""
    value = recall().get("repack_crash", "")
    return value if isinstance(value, str) else ""


SAMPLE = 1 << 20  # bytes read at the start and in the middle of a file for its identity


def file_key(model_path: str) -> str:
    """A model file by its content: size, and a hash of its first MiB (the header) and of a
    MiB in the middle (tensor data). A moved or copied file keeps its key; another
    quantization, or an edited file, gets another."""
    p = paths.expand_user(model_path)
    try:
        size = p.stat().st_size
        h = hashlib.sha1()
        with open(p, "rb") as f:
            h.update(f.read(SAMPLE))
            f.seek(size // 2)
            h.update(f.read(SAMPLE))
    except OSError:
        return str(p.resolve())
    return f"gguf {size} {h.hexdigest()[:16]}"


def _recalled_for_file(field: str, model_path: str) -> Any:
    """This file's value in a per-file table of the entry (None when there is none)."""
    table = recall().get(field)
    return table.get(file_key(model_path)) if isinstance(table, dict) else None


def tuned(model_path: str) -> dict[str, Any] | None:
    """The best settings `chatapp tune` measured for this file here, if it ran."""
    value = _recalled_for_file("tuned", model_path)
    return value if isinstance(value, dict) else None


def remember_tuned(model_path: str, best: dict[str, Any]) -> None:
    _remember_for_file("tuned", model_path, best)


def tune_crashed(model_path: str) -> str:
    """How the tune on first use crashed the worker for this file here ("" if it never did)."""
    value = _recalled_for_file("tune_crashed", model_path)
    return value if isinstance(value, str) else ""


def remember_tune_crash(model_path: str, how: str) -> None:
    """A tune that crashed the worker (e.g. "SIGSEGV"): the next start does not tune this file
    again on this machine and build, as a crashed load does not repack again."""
    _remember_for_file("tune_crashed", model_path, how)


def saved_ceilings() -> dict[str, Any] | None:
    """The speed ceilings measured on this machine (chatapp/ceilings.py), if they were."""
    value = recall().get("ceilings")
    return value if isinstance(value, dict) else None


def remember_ceilings(values: dict[str, Any]) -> None:
    """Keep measured ceilings with this machine's entry: another CPU measures again."""
    remember(ceilings=values)


def cpu_caches() -> list[dict[str, Any]]:
    """The first CPU's caches (level, type, size in bytes) as Linux lists them in sysfs; []
    elsewhere (psutil has no API for caches)."""
    found = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index[0-9]*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isascii() and digits.isdigit():
            found.append({"level": level, "type": kind, "bytes": int(digits) * scale})
    return found
