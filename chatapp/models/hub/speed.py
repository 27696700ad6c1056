"""Expected decode speed of a file here, before it is downloaded. A token costs whichever is
slower: reading every weight once (bytes / this machine's memory read rate, measured), or the
work per weight (parameters x the seconds per parameter of a real decode of the bundled model
here, the part of the time that does not shrink with fewer bytes). Both are measured once per
machine and llama.cpp build, and saved."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

CALIBRATION_TOKENS = 96
CALIBRATION_PROMPT = "Tell a long story about a lighthouse keeper and the sea."


@dataclass(frozen=True)
class Calibration:
    """This machine's memory read rate and the bundled model's decode."""

    bytes_per_s: float  # memory read, every usable CPU (numpy, a buffer far larger than the caches)
    decode_tps: float  # the bundled model's greedy decode here
    model: str
    n_params: int  # the bundled model's
    measured_at: float

    @property
    def s_per_param(self) -> float:
        return 1.0 / (self.decode_tps * max(self.n_params, 1))

    def expected_tps(self, size_bytes: int, n_params: int = 0) -> float:
        """Tokens/s of a file of this size (and parameter count, when known)."""
        reading = size_bytes / self.bytes_per_s
        working = n_params * self.s_per_param
        return 1.0 / max(reading, working, 1e-9)


def read_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    """Bytes/s read from memory by every CPU this process may use at once (the best of a few
    passes over a buffer much larger than the CPU's caches; numpy's sum releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from chatapp.cpus import usable_cpus

    data = np.ones(mib * 2**20 // 8)
    threads = usable_cpus()
    parts = np.array_split(data, threads)
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(np.sum, parts))
            best = max(best, data.nbytes / (time.perf_counter() - t0))
    return best


def saved() -> Calibration | None:
    from chatapp import machine

    data = machine.recall().get("decode_calibration")
    try:
        return Calibration(**data) if isinstance(data, dict) else None
    except TypeError:
        return None


def measure_decode(path: str, options=None) -> float:
    """Decode tokens/s of a file here: the calibration's own run (greedy, 96 tokens, a short
    prompt, ctx 512), so a file's estimate and its measurement compare like for like."""
    from dataclasses import replace

    from chatapp.engine.factory import make_engine
    from chatapp.engine.protocol import ChatMessage, GenerateRequest, LoadOptions
    from chatapp.models.compare import reply_ids
    from chatapp.sampling import SamplerSettings

    options = replace(options or LoadOptions(model_path=path), model_path=path, n_ctx=512)
    engine = make_engine(options)
    try:
        engine.start()
        settings = SamplerSettings(temperature=0.0, max_tokens=CALIBRATION_TOKENS)
        request = GenerateRequest(
            (ChatMessage("user", CALIBRATION_PROMPT),), settings, top_n=10, ignore_eos=True
        )
        _, finished = reply_ids(engine, request)
    finally:
        engine.close()
    tps = finished.stats.decode_tps if finished else None
    if not tps:
        raise RuntimeError(f"the decode of {Path(path).name} gave no speed")
    return tps


def calibrate(options=None, force: bool = False) -> Calibration:
    """The saved calibration, else a real decode of the bundled model (about 3 s), saved."""
    from dataclasses import asdict

    from chatapp.models.bundled import default_model

    found = None if force else saved()
    if found is not None:
        return found
    from chatapp import machine
    from chatapp.gguf.header import inspect

    model = str(default_model())
    tps = measure_decode(model, options)
    cal = Calibration(read_bandwidth(), tps, Path(model).name, inspect(model).n_params, time.time())
    machine.remember(decode_calibration=asdict(cal))
    return cal
