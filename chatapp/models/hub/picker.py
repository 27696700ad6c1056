"""Choosing a quant before downloading: each GGUF file of a repo with its size, bits per
weight, whether it fits here, its expected decode speed here, and one recommended row."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from chatapp import machine as host
from chatapp.models import fit
from chatapp.models.hub.repo_files import Listing
from chatapp.models.hub.speed import Calibration
from chatapp.models.sources import hf_cache

HEADROOM = 0.8  # the recommended file uses at most this share of the free memory
LARGEST_USEFUL = "Q8_0"  # past 8.5 bits per weight quality gains are nil and decode is slower


@dataclass(frozen=True)
class QuantRow:
    """One file of a repo, judged for this machine."""

    file: str
    quant: str
    size_bytes: int
    bits_per_weight: float | None
    memory_bytes: int  # weights + KV cache at n_ctx + compute buffer
    fits: bool
    where: str  # "GPU", "RAM" or "" (does not fit)
    expected_decode_tps: float | None
    downloaded: bool
    recommended: bool = False
    parts: int = 1
    decode_ceiling_tps: float | None = None  # this machine's read bandwidth / the file's size

    def speed_text(self) -> str:
        """The expected decode speed, and the ceiling no decode here passes ("-": unknown)."""
        tps = f"~{self.expected_decode_tps:.0f}" if self.expected_decode_tps else "-"
        return tps + (f" ≤{self.decode_ceiling_tps:.0f}" if self.decode_ceiling_tps else "")

    def to_dict(self) -> dict:
        return asdict(self)


def bits_guess(quant: str) -> float | None:
    """Bits per weight a quant type stands for (llama.cpp's table, else its digits + ~0.5)."""
    q = quant.upper().removeprefix("UD-")
    if q in fit.BITS_PER_WEIGHT:
        return fit.BITS_PER_WEIGHT[q]
    if q in ("F32", "FP32"):
        return 32.0
    if q in ("BF16", "FP16"):
        return 16.0
    m = re.match(r"[IT]?Q(\d+)", q)
    return int(m.group(1)) + 0.5 if m else None


def params_of(listing: Listing) -> int:
    """Parameters: the Hub's GGUF summary, else a file's size over its bits per weight (F16
    and Q8_0 first: their bits per weight hardly depend on the model)."""
    if listing.n_params:
        return listing.n_params
    known = ("F16", "BF16", "Q8_0", *fit.BITS_PER_WEIGHT)
    ranked = sorted(
        listing.models, key=lambda f: known.index(f.quant) if f.quant in known else len(known)
    )
    for f in ranked:
        bits = bits_guess(f.quant)
        if bits:
            return int(f.size * 8 / bits)
    return 0


def shape_for(listing: Listing) -> fit.ModelShape | None:
    """The KV-cache shape: a cached file of the repo's own header, else the known model shape
    nearest in size."""
    from chatapp.gguf.header import read_header

    for _, path in hf_cache.cached_ggufs(listing.repo):
        try:
            return fit.shape_from_header(read_header(path))
        except Exception:  # a damaged cached file: fall back to the reference shapes
            continue
    params = params_of(listing)
    return fit.reference_shape(params / 1e9) if params else None


def rows(
    listing: Listing, n_ctx: int, calibration: Calibration | None, machine: tuple | None = None
) -> list[QuantRow]:
    """The repo's model files, smallest first, with one recommended (none if nothing fits)."""
    gpu_free, ram_free = machine or fit.free_memory()
    gbps = read_gbps()
    shape = shape_for(listing)
    params = params_of(listing)
    cached = {name for name, _ in hf_cache.cached_ggufs(listing.repo)}
    out = []
    for f in sorted(listing.models, key=lambda f: f.size):
        extra = 0
        if shape is not None:
            kv = int(shape.kv_bytes_per_layer(n_ctx) * shape.n_layers)
            extra = kv + fit.compute_buffer_bytes(shape, n_ctx)
        need = f.size + extra
        where = _where(need, gpu_free, ram_free)
        tps = calibration.expected_tps(f.size, params) if calibration else None
        out.append(
            QuantRow(
                f.filename,
                f.quant,
                f.size,
                round(f.size * 8 / params, 2) if params else None,
                need,
                bool(where),
                where,
                tps,
                all(p.filename in cached for p in f.parts),
                parts=len(f.parts),
                decode_ceiling_tps=gbps * 1e9 / f.size if gbps and f.size else None,
            )
        )
    best = recommend(out, gpu_free, ram_free)
    return [r if r is not best else _with(r, recommended=True) for r in out]


def read_gbps() -> float | None:
    """This machine's measured memory read bandwidth (`chatapp machine`, the tune on first
    use), None before it was measured: a file's decode ceiling is that over its size (every
    weight read once a token; the context's cache adds a little more)."""
    value = (host.saved_ceilings() or {}).get("mem_read_gbps")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _with(row: QuantRow, **changes) -> QuantRow:
    from dataclasses import replace

    return replace(row, **changes)


def _where(need: int, gpu_free: int | None, ram_free: int | None) -> str:
    if gpu_free and need <= gpu_free - fit.GPU_RESERVE:
        return "GPU"
    if ram_free is None or need <= ram_free:
        return "RAM"
    return ""


def _room(row: QuantRow, gpu_free: int | None, ram_free: int | None) -> int | None:
    return gpu_free - fit.GPU_RESERVE if row.where == "GPU" and gpu_free else ram_free


def recommend(rows_: list[QuantRow], gpu_free: int | None, ram_free: int | None) -> QuantRow | None:
    """The largest file that fits with 20% to spare, no larger than Q8_0's bits per weight."""
    cap = fit.BITS_PER_WEIGHT[LARGEST_USEFUL] + 0.01

    def suits(r: QuantRow) -> bool:
        room = _room(r, gpu_free, ram_free)
        if not r.fits or (bits_guess(r.quant) or 0) > cap:
            return False
        return room is None or r.memory_bytes <= HEADROOM * room

    return max((r for r in rows_ if suits(r)), key=lambda r: r.size_bytes, default=None)


def reason(row: QuantRow, gpu_free: int | None, ram_free: int | None) -> str:
    """Why the recommended row was chosen, in words."""
    room = _room(row, gpu_free, ram_free)
    where = "in GPU memory" if row.where == "GPU" else "in RAM (CPU)"
    free = f" of {room / 1e9:.1f} GB free" if room else ""
    speed = (
        f"; about {row.expected_decode_tps:.0f} tokens/s here (an estimate)"
        if row.expected_decode_tps
        else ""
    )
    return (
        f"{row.quant or row.file}: the largest file that fits {where} with 20% to spare "
        f"(needs {row.memory_bytes / 1e9:.1f} GB{free}; larger than {LARGEST_USEFUL} gains "
        f"nothing worth its speed){speed}"
    )
