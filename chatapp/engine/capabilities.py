"""What an engine can do, declared by the engine: the UI, the CLI and the benches ask this."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """One engine's abilities. Every field is False unless the engine says so; a panel or a
    command that needs one hides itself or says so in a sentence when it is False."""

    live_settings: bool = False
    """Sampler settings change the reply in progress (update_settings) from its next token."""
    steering: bool = False
    """Control vectors (set_steering, residuals, meter)."""
    inside: bool = False
    """Logit lens, attention, embedding neighbours (inspect)."""
    drafts: bool = False
    """Speculative decoding: n-gram drafts or a draft model (GenerateRequest.draft)."""
    parallel_alternatives: bool = False
    """Several replies to one prompt decoded side by side (GenerateRequest.alternatives)."""
    sampled_probabilities: bool = False
    """Candidates after the sampler chain: which cut (top-k, top-p, min-p) dropped each."""
    candidates: bool = False
    """Candidates for each token with probabilities (top_n > 0)."""
    grammar: bool = False
    """A GBNF grammar or a JSON schema constrains the reply."""
    raw_prompt: bool = False
    """A prompt sent as is, without the chat template."""
    tokenize: bool = False
    """Cut any text into tokens with this model's vocabulary (tokenize)."""
    autotune: bool = False
    """A first-use tune of threads and flash attention (start_autotune, autotune_status)."""
    scoring: bool = False
    """Log-probabilities of given tokens and perplexity (score, perplexity)."""
    limits: bool = False
    """Its model file is known here, so a reply's bytes and FLOPs per token can be held
    against this machine's ceilings (models/reply_limits.py)."""


NOTHING = Capabilities()
"""An engine that can only chat."""
