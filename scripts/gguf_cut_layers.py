"""Copy a GGUF model keeping its first N blocks, the embedding optionally requantized (a small
real model for the GPU check: scripts/gpu_prepare.sh)."""

from __future__ import annotations

import argparse
import re
import sys

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

BLOCK = re.compile(r"blk\.(\d+)\.")


def kept(name: str, blocks: int) -> bool:
    """Every tensor outside the blocks (embedding, final norm, output), and blocks < `blocks`."""
    match = BLOCK.match(name)
    return match is None or int(match.group(1)) < blocks


def tensor_data(tensor, embedding_type: gguf.GGMLQuantizationType | None):
    """(raw data, its type): as stored, or token_embd requantized to `embedding_type`."""
    if embedding_type is None or tensor.name != "token_embd.weight":
        return tensor.data, tensor.tensor_type
    weights = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
    return quantize(weights, embedding_type), embedding_type


def cut(
    source: str, target: str, blocks: int, embedding_type: gguf.GGMLQuantizationType | None = None
) -> int:
    """Write `target`: `source` with blocks 0..blocks-1 and its block count set; its size."""
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    have = reader.fields[count_key].contents()
    if not 0 < blocks <= have:
        raise SystemExit(f"{source} has {have} blocks: keep between 1 and {have}")
    writer = gguf.GGUFWriter(target, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = blocks if field.name == count_key else field.contents()
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
    tensors = [
        (t.name, *tensor_data(t, embedding_type)) for t in reader.tensors if kept(t.name, blocks)
    ]
    for name, data, qtype in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()
    return sum(data.nbytes for _, data, _ in tensors)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--blocks", type=int, required=True, help="blocks to keep, from the first")
    parser.add_argument("--embedding-type", help="requantize token_embd, e.g. Q4_0")
    args = parser.parse_args(argv)
    qtype = gguf.GGMLQuantizationType[args.embedding_type] if args.embedding_type else None
    size = cut(args.source, args.target, args.blocks, qtype)
    print(f"{args.target}: {args.blocks} blocks, {size / 1e6:.1f} MB of tensors")


if __name__ == "__main__":
    main(sys.argv[1:])
