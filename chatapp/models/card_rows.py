"""The facts of a GGUF model card as (label, value) rows, shared by the CLI and the TUI."""

from __future__ import annotations

from chatapp.gguf.header import ModelCard
from chatapp.models import fit


def card_rows(card: ModelCard, with_path: bool = False) -> list[tuple[str, str]]:
    """Label/value pairs of a model card (the file path first when asked)."""
    mix = ", ".join(f"{name} x{count}" for name, count in card.tensor_types)
    rows = [("file", card.path)] if with_path else []
    return rows + [
        ("name", card.name),
        ("architecture", card.architecture or "-"),
        ("license", card.license or "-"),
        ("parameters", f"{card.n_params / 1e6:,.1f}M"),
        ("quantization", f"{card.quant} ({card.bits_per_weight:.2f} bits per weight)"),
        ("tensor types", mix),
        ("file size", f"{card.file_size:,} bytes ({fit.gib(card.file_size)})"),
        ("layers", str(card.n_layers)),
        ("heads", f"{card.n_heads} (KV heads {card.n_kv_heads}, head dim {card.head_dim})"),
        ("embedding", str(card.n_embd)),
        ("vocabulary", f"{card.vocab_size:,} ({card.tokenizer or 'unknown'} tokenizer)"),
        ("trained context", f"{card.context_length:,} tokens"),
        ("chat template", "yes" if card.has_chat_template else "no (a plain template is used)"),
        ("GGUF", f"version {card.gguf_version}, {card.n_tensors} tensors"),
    ]
