"""What a model's decode could reach on a few common devices, from their published bandwidth."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chatapp.models.token_cost import TokenCost

GB = 1e9


@dataclass(frozen=True)
class Device:
    """A device by its published memory bandwidth and memory size (vendors' spec sheets)."""

    name: str
    bandwidth_gbps: float
    memory_gb: float


DEVICES = (
    Device("laptop, DDR5-5600 dual channel (16 GB)", 89.6, 16),
    Device("Apple M2 Max (64 GB unified)", 400.0, 64),
    Device("NVIDIA GeForce RTX 4090 (24 GB)", 1008.0, 24),
    Device("NVIDIA H100 SXM (80 GB)", 3350.0, 80),
)
"""DDR5-5600 x 2 channels x 8 bytes; Apple's M2 Max 400 GB/s; NVIDIA's RTX 4090 1,008 GB/s
and H100 SXM 3.35 TB/s, as published."""


@dataclass(frozen=True)
class DeviceRow:
    """One device: the decode ceiling its bandwidth implies, and whether the model fits."""

    device: str
    bandwidth_gbps: float
    decode_ceiling_tps: float  # bandwidth / bytes per token: no decode goes faster there
    fits: bool

    def to_dict(self) -> dict:
        return asdict(self)


def device_rows(token: TokenCost, total_bytes: int, here_gbps: float | None) -> list[DeviceRow]:
    """Each device's decode ceiling for a token of this cost, this machine's (measured) first
    when known; `total_bytes` (weights, cache, buffers) decides whether it fits."""
    rows = []
    if here_gbps:
        rows.append(
            DeviceRow("this machine (measured)", here_gbps, here_gbps * GB / token.bytes, True)
        )
    for d in DEVICES:
        ceiling = d.bandwidth_gbps * GB / token.bytes
        rows.append(DeviceRow(d.name, d.bandwidth_gbps, ceiling, total_bytes <= d.memory_gb * GB))
    return rows


def format_device_rows(rows: list[DeviceRow]) -> str:
    """The rows as plain text: why a GPU is a number."""
    out = [f"{'decode ceiling (bandwidth / bytes per token)':<46}{'GB/s':>8}{'t/s':>10}  fits"]
    for r in rows:
        out.append(
            f"{r.device:<46}{r.bandwidth_gbps:>8.1f}{r.decode_ceiling_tps:>10.0f}"
            f"  {'yes' if r.fits else 'no'}"
        )
    return "\n".join(out)
