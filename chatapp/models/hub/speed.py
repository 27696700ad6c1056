"""Expected decode speed of a file here, before it is downloaded: decode reads every weight
once per token, so tokens/s ~ this machine's effective bytes/s over the bytes read per token.
The bytes/s is calibrated by a real decode of the bundled model, once per machine and build."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from chatapp.gguf.header import read_header

CALIBRATION_TOKENS = 96
CALIBRATION_PROMPT = "Tell a long story about a lighthouse keeper and the sea."


@dataclass(frozen=True)
class Calibration:
    """A measured decode: bytes read per token / seconds per token."""

    bytes_per_s: float
    decode_tps: float
    model: str
    bytes_per_token: int
    measured_at: float

    def expected_tps(self, bytes_per_token: int) -> float:
        return self.bytes_per_s / max(bytes_per_token, 1)


def bytes_per_token(path: str | Path) -> int:
    """Weights read to decode one token: every tensor but the token embeddings (one row of
    them is read), unless the output head is tied to them (then they are read whole)."""
    header = read_header(path)
    names = {t.name for t in header.tensors}
    tied = "output.weight" not in names
    total = 0
    for t in header.tensors:
        if t.name == "token_embd.weight" and not tied:
            continue
        total += t.nbytes
    return total


def saved() -> Calibration | None:
    from chatapp.engine.local import machine

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
    from chatapp.engine.local import machine

    model = str(default_model())
    tps = measure_decode(model, options)
    per_token = bytes_per_token(model)
    cal = Calibration(per_token * tps, tps, Path(model).name, per_token, time.time())
    machine.remember(decode_calibration=asdict(cal))
    return cal
