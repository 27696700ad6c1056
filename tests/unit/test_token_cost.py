"""A decoded token's bytes and FLOPs from the header, against gguf's own reader of the file."""

from __future__ import annotations

import gguf
import pytest

from chatapp.gguf.header import read_header
from chatapp.models.token_cost import model_cost


def _independent_count(path: str, depth: int) -> tuple[int, int]:
    """Bytes and weight FLOPs of one token, counted with the gguf package's reader: every
    tensor's bytes, one row of the embeddings (read again whole as the tied head), and an f16
    K and V for each layer and context cell."""
    reader = gguf.GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()

    def number(key: str) -> int:
        return int(reader.fields[f"{arch}.{key}"].parts[-1][0])

    tensors = {t.name: t for t in reader.tensors}
    total = sum(int(t.n_bytes) for t in tensors.values())
    flops = sum(2 * int(t.n_elements) for t in tensors.values() if len(t.shape) >= 2)
    embd = tensors["token_embd.weight"]
    row = int(embd.n_bytes) // int(embd.shape[1])
    if "output.weight" in tensors:
        total += row - int(embd.n_bytes)
        flops -= 2 * int(embd.n_elements)
    else:
        total += row
    layers, kv_heads = number("block_count"), number("attention.head_count_kv")
    head = number("embedding_length") // number("attention.head_count")
    kv = 2 * layers * kv_heads * head * (depth + 1) * 2
    return total + kv, flops


@pytest.mark.parametrize("depth", [0, 1000])
def test_bytes_per_token_match_an_independent_count(model_path, depth):
    cost = model_cost(read_header(model_path)).at(depth)
    want_bytes, want_flops = _independent_count(model_path, depth)
    assert cost.bytes == pytest.approx(want_bytes, rel=0.03)
    assert cost.weight_flops == pytest.approx(want_flops, rel=0.03)
    # the bundled model ties its head to the embeddings: read twice, so more than the file
    # minus one embedding matrix, and less than the file plus the KV cache
    assert cost.kv_bytes == 2 * 30 * 3 * 64 * (depth + 1) * 2
    assert cost.kv_share == pytest.approx(cost.kv_bytes / cost.bytes)


def test_a_deeper_token_reads_more_cache_and_the_same_weights(model_path):
    cost = model_cost(read_header(model_path))
    short, long = cost.at(0), cost.at(4000)
    assert short.weight_bytes == long.weight_bytes and short.weight_flops == long.weight_flops
    assert long.kv_bytes > 100 * short.kv_bytes and long.attention_flops > short.attention_flops
    q8 = model_cost(read_header(model_path), cache_type="q8_0").at(4000)
    assert q8.kv_bytes == pytest.approx(long.kv_bytes * 34 / 64, rel=1e-3)


def test_offloaded_layers_split_the_bytes_between_gpu_and_ram(model_path):
    cost = model_cost(read_header(model_path))
    total = cost.at(500).bytes
    assert cost.on_devices(500, 0) == (0, total)
    gpu, ram = cost.on_devices(500, 10)  # the last 10 of 30 blocks, their third of the cache
    assert gpu + ram == total
    assert gpu == sum(cost.block_bytes[20:]) + cost.at(500).kv_bytes * 10 // 30
    everything, left = cost.on_devices(500, 31)  # 30 blocks and the head (as -ngl counts)
    assert everything == sum(cost.block_bytes) + cost.at(500).kv_bytes + cost.head_bytes
    assert 0 < left < 10_000  # the embedding row and the norms stay in RAM
