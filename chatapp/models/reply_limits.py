"""A reply's speed held against the machine's ceilings: what bounds its decode."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from chatapp.errors import ChatappError
from chatapp.gguf.header import read_header
from chatapp.models.token_cost import ModelCost, model_cost

HALF = 0.5  # a ceiling at least half used bounds the speed; neither: overhead


@dataclass(frozen=True)
class ReplyLimits:
    """`ask --json`'s "limits": one reply's decode and prefill against this machine's peaks."""

    bytes_per_token: int  # at the reply's mean decode depth
    kv_share: float  # of those bytes, the KV cache's
    flops_per_token: int
    decode_gbps: float  # bytes_per_token x decode t/s
    decode_gflops: float
    prefill_gflops: float  # flops per token x prefill t/s
    mem_peak_gbps: float
    compute_peak_gflops: float
    mem_share: float  # decode_gbps / mem_peak_gbps
    compute_share: float  # decode_gflops / compute_peak_gflops
    prefill_compute_share: float  # prefill_gflops / compute_peak_gflops
    bound: str  # what bounds decode: "memory", "compute" or "overhead" (neither half used)
    gpu_bytes_per_token: int = 0  # of bytes_per_token, those in GPU memory (offloaded layers)
    decode_intensity: float = 0.0  # FLOPs per byte read: where decode sits on a roofline
    prefill_intensity: float = 0.0  # ... prefill's: a weight read serves a batch of tokens

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One line for the Speed panel and the stats line."""
        why = {
            "memory": "reading the weights is the limit",
            "compute": "the arithmetic is the limit",
            "overhead": "neither ceiling half used: the model is small for this machine",
        }[self.bound]
        return (
            f"decode {self.decode_gbps:.1f} GB/s of {self.mem_peak_gbps:.0f} "
            f"({self.mem_share:.0%}; the KV cache {self.kv_share:.0%} of the bytes): "
            f"{self.bound}-bound: {why}"
        )


def reply_limits(
    cost: ModelCost,
    prompt_tokens: int,
    completion_tokens: int,
    decode_tps: float,
    prefill_tps: float,
    mem_peak_gbps: float,
    compute_peak_gflops: float,
    n_batch: int = 512,
) -> ReplyLimits:
    """Where a reply stood: its tokens' cost at their mean depth (the prompt and half the
    reply), times its rates, over the ceilings. Prefill reads the weights and the cache once
    for a batch of up to `n_batch` prompt tokens."""
    token = cost.at(prompt_tokens + completion_tokens // 2)
    prompt = cost.at(prompt_tokens // 2)
    batch = max(1, min(prompt_tokens, n_batch))
    decode_gbps = token.bytes * decode_tps / 1e9
    decode_gflops = token.flops * decode_tps / 1e9
    prefill_gflops = prompt.flops * prefill_tps / 1e9
    mem_share = decode_gbps / mem_peak_gbps if mem_peak_gbps > 0 else 0.0
    peak = compute_peak_gflops if compute_peak_gflops > 0 else float("inf")
    compute_share = decode_gflops / peak
    if mem_share >= HALF and mem_share >= compute_share:
        bound = "memory"
    elif compute_share >= HALF:
        bound = "compute"
    else:
        bound = "overhead"
    return ReplyLimits(
        bytes_per_token=token.bytes,
        kv_share=round(token.kv_share, 4),
        flops_per_token=token.flops,
        decode_gbps=round(decode_gbps, 3),
        decode_gflops=round(decode_gflops, 3),
        prefill_gflops=round(prefill_gflops, 3),
        mem_peak_gbps=mem_peak_gbps,
        compute_peak_gflops=compute_peak_gflops,
        mem_share=round(mem_share, 4),
        compute_share=round(compute_share, 4),
        prefill_compute_share=round(prefill_gflops / peak, 4),
        bound=bound,
        decode_intensity=round(token.flops / token.bytes, 3),
        prefill_intensity=round(batch * prompt.flops / prompt.bytes, 3),
    )


def limits_of_reply(
    model_path: str, stats, ceilings: dict | None, n_batch: int = 512, n_gpu_layers: int = 0
) -> ReplyLimits | None:
    """A finished reply's limits from its model file and the saved ceilings (None when the
    file's header cannot be read, or nothing was measured: `chatapp machine` measures)."""
    if not ceilings:
        return None
    try:
        cost = model_cost(read_header(model_path))
        mem, peak = float(ceilings["mem_read_gbps"]), float(ceilings["compute_gflops"])
    except (ChatappError, OSError, KeyError, TypeError, ValueError):
        return None
    found = reply_limits(
        cost,
        stats.prompt_tokens,
        stats.completion_tokens,
        stats.decode_tps or 0.0,
        stats.prefill_tps or 0.0,
        mem,
        peak,
        n_batch,
    )
    if n_gpu_layers <= 0:
        return found
    depth = stats.prompt_tokens + stats.completion_tokens // 2
    return replace(found, gpu_bytes_per_token=cost.on_devices(depth, n_gpu_layers)[0])
