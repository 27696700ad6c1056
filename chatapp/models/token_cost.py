"""What one decoded token costs, from the GGUF header: bytes read and arithmetic done."""

from __future__ import annotations

import re
from dataclasses import dataclass

from chatapp.gguf.header import Header, card_from_header
from chatapp.models.fit import CACHE_TYPE_BYTES

EMBEDDINGS = "token_embd.weight"
OUTPUT = "output.weight"


@dataclass(frozen=True)
class TokenCost:
    """One decoded token at a depth: the weights it reads, the KV cache it reads, the FLOPs."""

    weight_bytes: int  # every weight tensor, but one row of the token embeddings
    kv_bytes: int  # K and V of every layer over the context before it
    weight_flops: int  # 2 x the multiply-accumulates of the weight matrices
    attention_flops: int  # 2 x those of q.k and the weighted sum of v, over the context
    depth: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def flops(self) -> int:
        return self.weight_flops + self.attention_flops

    @property
    def kv_share(self) -> float:
        """How much of what a token reads is the KV cache: why long chats decode slower."""
        return self.kv_bytes / self.bytes if self.bytes else 0.0


@dataclass(frozen=True)
class ModelCost:
    """The parts of a token's cost that do not depend on the depth."""

    weight_bytes: int
    weight_flops: int
    kv_bytes_per_cell: float  # every layer's K and V of one context cell
    attention_flops_per_cell: int
    block_bytes: tuple[int, ...] = ()  # the weights of blk.0 .. blk.N-1
    head_bytes: int = 0  # the output head and its norm (the tied embeddings, read whole)

    def on_devices(self, depth: int, n_gpu_layers: int) -> tuple[int, int]:
        """Bytes a token at `depth` reads from GPU memory and from RAM, with llama.cpp's
        offload of `n_gpu_layers` (resolved: the last blocks with their KV cache first, the
        head only when every layer is offloaded, as chatapp fit counts them)."""
        token = self.at(depth)
        n = len(self.block_bytes)
        if not n or n_gpu_layers <= 0:
            return 0, token.bytes
        on_gpu = min(n_gpu_layers, n)
        kv = token.kv_bytes * on_gpu // n
        gpu = sum(self.block_bytes[n - on_gpu :]) + kv
        if n_gpu_layers > n:
            gpu += self.head_bytes
        return gpu, token.bytes - gpu

    def at(self, depth: int) -> TokenCost:
        """A token decoded after `depth` tokens of context (its own cell included)."""
        cells = max(0, depth) + 1
        return TokenCost(
            weight_bytes=self.weight_bytes,
            kv_bytes=round(self.kv_bytes_per_cell * cells),
            weight_flops=self.weight_flops,
            attention_flops=self.attention_flops_per_cell * cells,
            depth=max(0, depth),
        )


def model_cost(header: Header, cache_type: str = "f16") -> ModelCost:
    """A token's cost for the model in `header` with a KV cache of `cache_type` (f16 by
    default, as llama.cpp's). The token embeddings are a lookup: one row is read and nothing
    multiplied, unless the output head is tied to them (no output.weight): then the whole
    matrix is read again as the head and multiplied. One-dimensional tensors (norms, biases)
    are read and counted as bytes only."""
    card = card_from_header(header)
    tied = not any(t.name == OUTPUT for t in header.tensors)
    weight_bytes = weight_flops = head = 0
    blocks = [0] * card.n_layers
    for tensor in header.tensors:
        rows = tensor.shape[1] if len(tensor.shape) > 1 else 1
        if tensor.name == EMBEDDINGS:
            weight_bytes += tensor.nbytes // max(1, rows)
            if not tied:
                continue
        weight_bytes += tensor.nbytes
        if len(tensor.shape) >= 2:
            weight_flops += 2 * tensor.n_elements
        block = re.match(r"blk\.(\d+)\.", tensor.name)
        if block and int(block.group(1)) < card.n_layers:
            blocks[int(block.group(1))] += tensor.nbytes
        elif tensor.name.startswith("output") or (tied and tensor.name == EMBEDDINGS):
            head += tensor.nbytes
    per_cell = card.n_kv_heads * (card.head_dim + card.head_dim_v) * card.n_layers
    attention = 2 * card.n_layers * card.n_heads * (card.head_dim + card.head_dim_v)
    return ModelCost(
        weight_bytes=weight_bytes,
        weight_flops=weight_flops,
        kv_bytes_per_cell=per_cell * CACHE_TYPE_BYTES[cache_type],
        attention_flops_per_cell=attention,
        block_bytes=tuple(blocks),
        head_bytes=head,
    )
