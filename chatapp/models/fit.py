"""Will a model fit: weights + KV cache + compute buffer vs free GPU memory and RAM (pure)."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass

from chatapp.engine.protocol import ALL_GPU_LAYERS, gpu_layer_total, resolved_gpu_layers
from chatapp.gguf.header import Header, card_from_header
from chatapp.machine import ram_available

GIB = 1024**3
MIB = 1024**2
WHAT_IF_PARAMS_B = (0.01, 2000.0)
"""The what-if model sizes taken (billions of parameters): `fit --params`, the model card."""
WHAT_IF_MEMORY_GIB = (0.01, 100_000.0)
"""The what-if memory sizes taken (GiB): `fit --memory`, the model card."""
GPU_RESERVE = 512 * MIB  # CUDA/Metal context and allocator slack, not in nvidia-smi's "free"

# Bytes per element of the KV cache types llama.cpp offers (--cache-type-k/-v).
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}

# Whole-file bits per weight measured on Llama-3.1-8B, from llama.cpp's
# tools/quantize/README.md (the table "bits/weight" of the vendored copy in llama-cpp-python
# 0.3.36). Its 70B Q4_K_M file, 43.1 GB, is 4.88 bits per weight: the figures carry over.
BITS_PER_WEIGHT = {
    "F16": 16.00,
    "Q8_0": 8.50,
    "Q6_K": 6.56,
    "Q5_K_M": 5.70,
    "Q4_K_M": 4.89,
    "Q3_K_M": 4.00,
    "Q2_K": 3.16,
}


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on: per-layer weights and the attention/vocab sizes."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim_k: int
    head_dim_v: int
    n_embd: int
    n_vocab: int
    layer_bytes: tuple[int, ...]  # weights of blk.0 .. blk.N-1
    output_bytes: int  # output head (+ norm); goes to the GPU with the last "layer"
    other_bytes: int  # token embeddings and the rest, kept in RAM
    output_copy_bytes: int = 0  # tied head: llama.cpp copies token_embd to the GPU
    name: str = ""

    @property
    def weights_bytes(self) -> int:
        """Tensor data in the file."""
        return sum(self.layer_bytes) + self.output_bytes - self.output_copy_bytes + self.other_bytes

    def kv_bytes_per_layer(self, n_ctx: int, cache_type: str = "f16") -> float:
        per_token = self.n_kv_heads * (self.head_dim_k + self.head_dim_v)
        return n_ctx * per_token * CACHE_TYPE_BYTES[cache_type]


def shape_from_header(h: Header) -> ModelShape:
    """The memory shape of a GGUF file, from its header."""
    card = card_from_header(h)
    layers = [0] * card.n_layers
    output = other = 0
    for t in h.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m and int(m.group(1)) < card.n_layers:
            layers[int(m.group(1))] += t.nbytes
        elif t.name.startswith("output"):
            output += t.nbytes
        else:
            other += t.nbytes
    copy = 0
    if not any(t.name == "output.weight" for t in h.tensors):  # tied embeddings
        copy = next((t.nbytes for t in h.tensors if t.name == "token_embd.weight"), 0)
    return ModelShape(
        n_layers=card.n_layers,
        n_heads=card.n_heads,
        n_kv_heads=card.n_kv_heads,
        head_dim_k=card.head_dim,
        head_dim_v=card.head_dim_v,
        n_embd=card.n_embd,
        n_vocab=card.vocab_size,
        layer_bytes=tuple(layers),
        output_bytes=output + copy,
        other_bytes=other,
        output_copy_bytes=copy,
        name=card.name,
    )


def compute_buffer_bytes(
    shape: ModelShape, n_ctx: int, n_ubatch: int = 512, flash_attn: bool = False
) -> int:
    """llama.cpp's compute buffer: the larger of the logits step and the attention step.

    Calibrated on SmolLM2-135M against the sizes llama.cpp logs ("compute buffer size"):
    98.25 MiB at ctx 1024 and 4096, 166.4 MiB at ctx 8192 (ubatch 512), within 2 %.
    """
    ub = min(n_ubatch, n_ctx)
    logits = 4 * ub * (shape.n_vocab + 2 * shape.n_embd)
    attention = 0 if flash_attn else 4 * ub * n_ctx * (shape.n_heads + 1)
    attention += 4 * ub * 3 * shape.n_embd * 2
    return int(max(logits, attention) + 4 * shape.n_vocab)  # + the output buffer


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model needs at one context size and GPU split."""

    n_ctx: int
    n_gpu_layers: int  # llama.cpp counting (protocol.gpu_layer_total = all, with the head)
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    gpu_bytes: int
    ram_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.gpu_bytes + self.ram_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes}


def estimate(
    shape: ModelShape,
    n_ctx: int,
    n_gpu_layers: int = 0,
    cache_type: str = "f16",
    n_ubatch: int = 512,
    flash_attn: bool = False,
) -> MemoryEstimate:
    """Memory for a model: the last n_gpu_layers layers (and their KV) on the GPU, rest in RAM."""
    n = shape.n_layers
    ngl = resolved_gpu_layers(n_gpu_layers, n)
    on_gpu = min(ngl, n)
    kv_layer = shape.kv_bytes_per_layer(n_ctx, cache_type)
    kv = int(kv_layer * n)
    compute = compute_buffer_bytes(shape, n_ctx, n_ubatch, flash_attn)
    layers_gpu = sum(shape.layer_bytes[n - on_gpu :])
    head_gpu = shape.output_bytes if ngl == gpu_layer_total(n) else 0
    gpu = layers_gpu + head_gpu + int(kv_layer * on_gpu) + (compute if ngl > 0 else 0)
    moved = layers_gpu + (head_gpu - shape.output_copy_bytes if head_gpu else 0)  # off RAM
    host_compute = compute if ngl == 0 else 4 * min(n_ubatch, n_ctx) * shape.n_embd * 2
    ram = shape.weights_bytes - moved + int(kv_layer * (n - on_gpu)) + host_compute
    return MemoryEstimate(n_ctx, ngl, shape.weights_bytes, kv, compute, gpu, ram)


def max_gpu_layers(
    shape: ModelShape, n_ctx: int, gpu_free: int, cache_type: str = "f16", **kw
) -> int:
    """The most layers (llama.cpp -ngl, gpu_layer_total = all) whose memory fits gpu_free."""
    budget = gpu_free - GPU_RESERVE
    best = 0
    for ngl in range(1, gpu_layer_total(shape.n_layers) + 1):
        if estimate(shape, n_ctx, ngl, cache_type, **kw).gpu_bytes > budget:
            break
        best = ngl
    return best


# ---- the machine --------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_bytes: int
    free_bytes: int


def parse_nvidia_smi(text: str) -> list[GpuMemory]:
    """Parse `nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,...`."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            idx, total, free = int(parts[0]), int(parts[-2]), int(parts[-1])
        except ValueError:
            continue
        gpus.append(GpuMemory(idx, ", ".join(parts[1:-2]), total * MIB, free * MIB))
    return gpus


def gpu_memory(timeout: float = 5.0) -> list[GpuMemory]:
    """Free memory of each NVIDIA GPU (empty when nvidia-smi is absent or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    query = "--query-gpu=index,name,memory.total,memory.free"
    try:
        out = subprocess.run(
            [exe, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else []


def free_memory() -> tuple[int | None, int | None]:
    """(free GPU memory, all NVIDIA GPUs together: None without one; available RAM)."""
    gpus = gpu_memory()
    return (sum(g.free_bytes for g in gpus) if gpus else None), ram_available()


# ---- verdicts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitReport:
    """One model at one context size against this machine."""

    model: str
    estimate: MemoryEstimate  # at the requested n_gpu_layers
    n_layers: int
    gpu_free_bytes: int | None
    ram_available_bytes: int | None
    gpu_layers_fit: int  # 0 when there is no GPU
    verdict: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["estimate"] = self.estimate.to_dict()
        return data


def fit_report(
    shape: ModelShape,
    n_ctx: int,
    n_gpu_layers: int = ALL_GPU_LAYERS,
    gpu_free: int | None = None,
    ram_free: int | None = None,
    cache_type: str = "f16",
) -> FitReport:
    """Where the model would run here and whether it fits."""
    n = shape.n_layers
    fit_layers = max_gpu_layers(shape, n_ctx, gpu_free, cache_type) if gpu_free else 0
    ngl = n_gpu_layers if gpu_free else 0
    est = estimate(shape, n_ctx, ngl, cache_type)
    if not gpu_free:
        where = "no GPU found: it runs on the CPU"
    elif fit_layers >= gpu_layer_total(n):
        where = f"all {gpu_layer_total(n)} layers fit on the GPU"
    elif fit_layers == 0:
        where = "no layer fits on the GPU: it runs on the CPU"
    else:
        where = (
            f"{fit_layers} of {gpu_layer_total(n)} layers fit on the GPU (use --ngl {fit_layers})"
        )
    if ram_free is not None and est.ram_bytes > ram_free:
        verdict = f"{where}; it does NOT fit in RAM ({gib(est.ram_bytes)} > {gib(ram_free)})"
    elif gpu_free and est.gpu_bytes > gpu_free - GPU_RESERVE:
        verdict = f"{where}; --ngl {est.n_gpu_layers} asks for more GPU memory than is free"
    else:
        verdict = f"{where}; it fits"
    return FitReport(shape.name, est, n, gpu_free, ram_free, fit_layers, verdict)


# ---- what-if ---------------------------------------------------------------------------------

# Shapes of well-known models, to size the KV cache of a hypothetical N-billion model:
# (billions of parameters, name, layers, heads, KV heads, head dim, embedding, vocab).
REFERENCE_SHAPES = (
    (0.135, "SmolLM2-135M", 30, 9, 3, 64, 576, 49152),
    (1.24, "Llama-3.2-1B", 16, 32, 8, 64, 2048, 128256),
    (3.21, "Llama-3.2-3B", 28, 24, 8, 128, 3072, 128256),
    (8.03, "Llama-3.1-8B", 32, 32, 8, 128, 4096, 128256),
    (14.8, "Qwen2.5-14B", 48, 40, 8, 128, 5120, 152064),
    (32.8, "Qwen2.5-32B", 64, 40, 8, 128, 5120, 152064),
    (70.6, "Llama-3.1-70B", 80, 64, 8, 128, 8192, 128256),
    (405.0, "Llama-3.1-405B", 126, 128, 8, 128, 16384, 128256),
)


def reference_shape(params_b: float) -> ModelShape:
    """The known model shape nearest to params_b (by ratio), weights scaled to params_b."""
    ref = min(REFERENCE_SHAPES, key=lambda r: abs(math.log(params_b / r[0])))
    _, name, layers, heads, kv_heads, head_dim, embd, vocab = ref
    zeros = (0,) * layers
    return ModelShape(
        layers, heads, kv_heads, head_dim, head_dim, embd, vocab, zeros, 0, 0, name=name
    )


@dataclass(frozen=True)
class WhatIfRow:
    quant: str
    bits_per_weight: float
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    total_bytes: int
    fits: bool


def what_if(
    params_b: float, memory_bytes: int, n_ctx: int = 4096, quants: dict[str, float] | None = None
) -> tuple[str, list[WhatIfRow]]:
    """A model of params_b billion parameters at each quantization vs memory_bytes."""
    if params_b <= 0:
        raise ValueError("the parameter count must be positive")
    shape = reference_shape(params_b)
    kv = int(shape.kv_bytes_per_layer(n_ctx) * shape.n_layers)
    compute = compute_buffer_bytes(shape, n_ctx)
    rows = []
    for quant, bpw in (quants or BITS_PER_WEIGHT).items():
        weights = int(params_b * 1e9 * bpw / 8)
        total = weights + kv + compute
        rows.append(WhatIfRow(quant, bpw, weights, kv, compute, total, total <= memory_bytes))
    return shape.name, rows


# ---- text -----------------------------------------------------------------------------------


def gib(n: float | None) -> str:
    """Bytes as a short human string (binary units)."""
    if n is None:
        return "-"
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.1f} MiB"


def format_fit(r: FitReport) -> str:
    """The fit report as plain text."""
    e = r.estimate
    lines = [
        f"model        {r.model}",
        f"context      {e.n_ctx} tokens",
        f"weights      {gib(e.weights_bytes)}",
        f"KV cache     {gib(e.kv_bytes)} (f16)",
        f"compute      {gib(e.compute_bytes)} (estimate)",
        f"total        {gib(e.weights_bytes + e.kv_bytes + e.compute_bytes)}",
        f"GPU free     {gib(r.gpu_free_bytes)}",
        f"RAM free     {gib(r.ram_available_bytes)}",
        f"at --ngl {e.n_gpu_layers:<3} GPU {gib(e.gpu_bytes)}, RAM {gib(e.ram_bytes)}",
        f"verdict      {r.verdict}",
    ]
    return "\n".join(lines)


def format_what_if(
    params_b: float, memory_bytes: int, ref: str, rows: list[WhatIfRow], n_ctx: int
) -> str:
    """The what-if table as plain text."""
    out = [
        f"A {params_b:g}B model (KV sized like {ref}) at ctx {n_ctx} vs {gib(memory_bytes)}:",
        f"{'quant':<8}{'bpw':>6}{'weights':>12}{'KV':>11}{'compute':>11}{'total':>12}  fits",
    ]
    for r in rows:
        out.append(
            f"{r.quant:<8}{r.bits_per_weight:>6.2f}{gib(r.weights_bytes):>12}"
            f"{gib(r.kv_bytes):>11}{gib(r.compute_bytes):>11}{gib(r.total_bytes):>12}"
            f"  {'yes' if r.fits else 'no'}"
        )
    return "\n".join(out)
