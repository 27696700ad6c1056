"""Quantize a GGUF file with llama.cpp in a child process (its aborts and logs stay there)."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from chatapp import paths
from chatapp.cpus import usable_cpus
from chatapp.engine.local.process.child import real_std_streams
from chatapp.engine.protocol import EngineError
from chatapp.errors import ModelFileError
from chatapp.gguf.header import inspect

# Target name -> llama_cpp LLAMA_FTYPE_MOSTLY_* suffix. IQ1/IQ2/IQ3_XXS/Q2_K_S are left out:
# llama.cpp refuses them without an importance matrix.
QUANT_TYPES = (
    "F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S",
    "Q4_1", "Q4_0", "IQ4_NL", "IQ4_XS", "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K",
)  # fmt: skip
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
UNQUANTIZED = ("F32", "F16", "BF16")
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class QuantizeResult:
    """One quantized file."""

    source: str
    output: str
    type: str
    seconds: float
    size_bytes: int
    source_size_bytes: int
    warning: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def normalize_type(name: str) -> str:
    """The canonical name of a quantization type, or EngineError naming the choices."""
    key = name.strip().upper().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in QUANT_TYPES:
        raise EngineError(
            f"unknown quantization type '{name}'; choose one of {', '.join(QUANT_TYPES)}"
        )
    return key


def base_stem(path: Path) -> str:
    """The file's stem without a trailing quantization name (model.Q4_1.gguf -> model)."""
    stem = path.stem
    names = sorted({*QUANT_TYPES, "F32", "Q4_1", "Q8_1"}, key=len, reverse=True)
    pattern = r"[.\-_](?:" + "|".join(re.escape(n) for n in names) + r")\Z"
    return re.sub(pattern, "", stem, flags=re.IGNORECASE) or stem


def output_path(src: str | Path, qtype: str, out_dir: str | Path | None = None) -> Path:
    """Where `src` quantized to `qtype` goes: <out_dir or cache>/<stem>.<TYPE>.gguf."""
    src = Path(src)
    folder = Path(out_dir) if out_dir is not None else paths.models_cache_dir()
    return folder / f"{base_stem(src)}.{qtype}.gguf"


def requantize_warning(source_quant: str, src_name: str, qtype: str) -> str:
    """A warning when the source is already quantized (empty otherwise)."""
    if source_quant.removeprefix("guessed ") in UNQUANTIZED:
        return ""
    return (
        f"{src_name} is already quantized ({source_quant}): the {qtype} copy is made from "
        "those weights, so its quality cannot exceed the source"
    )


def _child(src: str, dst: str, ftype_name: str, nthread: int, log_path: str) -> None:
    """Runs in the spawned process: fds 1/2 go to the log, then llama.cpp quantizes."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.allow_requantize = True
    params.nthread = nthread
    code = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    os._exit(0 if code == 0 else 3)


def _log_tail(log: Path, start: int, lines: int = 6) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(start)
            text = fh.read()[-32768:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def quantize(
    src: str | Path,
    qtype: str,
    out_dir: str | Path | None = None,
    nthread: int | None = None,
    timeout: float = TIMEOUT_S,
) -> QuantizeResult:
    """Write a `qtype` copy of `src`; one sentence when it cannot: ModelFileError for the source
    or the place of the copy, EngineError when llama.cpp fails."""
    qtype = normalize_type(qtype)
    src_path = Path(src)
    card = inspect(src_path)  # validates the header first
    dst = _writable_output(src_path, qtype, out_dir)
    part = dst.with_name(dst.name + ".part")
    log = paths.log_dir() / "quantize.log"
    start = log.stat().st_size if log.exists() else 0
    t0 = time.perf_counter()
    code, timed_out = _run_child(src_path, part, qtype, nthread or usable_cpus(), log, timeout)
    seconds = time.perf_counter() - t0
    if code != 0 or not part.is_file():
        part.unlink(missing_ok=True)
        why = _failure(code, timed_out, timeout)
        tail = _log_tail(log, start, 1).strip()
        detail = f": {tail}" if tail else ""
        raise EngineError(f"quantizing {src_path} to {qtype} failed, {why}{detail} (log: {log})")
    os.replace(part, dst)
    return QuantizeResult(
        source=str(src_path),
        output=str(dst),
        type=qtype,
        seconds=seconds,
        size_bytes=dst.stat().st_size,
        source_size_bytes=card.file_size,
        warning=requantize_warning(card.quant, src_path.name, qtype),
    )


def _writable_output(src_path: Path, qtype: str, out_dir: str | Path | None) -> Path:
    """Where the copy goes, its folder made; ModelFileError when it would overwrite the source
    or cannot be written."""
    dst = output_path(src_path, qtype, out_dir)
    if dst.resolve() == src_path.resolve():
        raise ModelFileError(f"{dst} would overwrite the source; choose another --out folder")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelFileError(f"cannot create {dst.parent}: {exc.strerror or exc}") from exc
    if not os.access(dst.parent, os.W_OK):
        raise ModelFileError(f"cannot write to {dst.parent}: permission denied")
    return dst


def _run_child(
    src_path: Path, part: Path, qtype: str, nthread: int, log: Path, timeout: float
) -> tuple[int | None, bool]:
    """Quantize in a spawned child; its exit code and whether it ran past `timeout` (killed)."""
    proc = mp.get_context("spawn").Process(
        target=_child,
        args=(str(src_path), str(part), qtype, nthread, str(log)),
        name="chatapp-quantize",
        daemon=True,
    )
    with real_std_streams():  # a TUI's sys.stderr has no fd for multiprocessing to pass
        proc.start()
    proc.join(timeout)
    timed_out = proc.is_alive()
    if timed_out:
        proc.kill()
        proc.join(5)
    return proc.exitcode, timed_out


def _failure(code: int | None, timed_out: bool, timeout: float) -> str:
    """Why the child failed, as the end of a sentence."""
    if timed_out:
        return f"it took longer than {timeout:g} s"
    if code is None or code == -signal.SIGKILL:
        return "it was killed"
    if code < 0:
        return f"llama.cpp crashed ({signal.Signals(-code).name})"
    return "llama.cpp reported an error"
