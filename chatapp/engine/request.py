"""What one reply is asked with: the messages, the sampler settings, a grammar, the steering."""

from __future__ import annotations

from dataclasses import dataclass, field

from chatapp.engine.steering import Steering
from chatapp.sampling import SamplerSettings


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class Grammar:
    """A constraint the reply must follow: llama.cpp's GBNF text, written by hand (a .gbnf file)
    or converted from a JSON schema (chatapp/engine/schema_grammar.py)."""

    gbnf: str
    source: str = ""  # what it was made from, said in the status line: "schema person.json"
    root: str = "root"


@dataclass(frozen=True)
class GenerateRequest:
    """One reply to generate."""

    messages: tuple[ChatMessage, ...]
    settings: SamplerSettings = field(default_factory=SamplerSettings)
    stop: tuple[str, ...] = ()
    reply_prefix_ids: tuple[int, ...] = ()  # continue / rewind: the reply starts with these
    top_n: int = 10  # candidates reported per token (0 = none)
    ignore_eos: bool = False  # benchmarks: generate exactly max_tokens
    fresh_cache: bool = False  # benchmarks: evaluate the whole prompt (nothing kept in the cache)
    raw_prompt: str | None = None  # skip the chat template (completion mode)
    prompt_ids: tuple[int, ...] | None = None  # exact prompt tokens (benchmarks); no template
    enable_thinking: bool | None = None  # the template's switch for reasoning (None: its own)
    n_alternatives: int = 1
    """Replies decoded together in one batch (2..8: "regenerate x N"); Token.seq says whose."""
    draft: str = ""
    """Speculative decoding: "ngram" (drafts looked up in the prompt and reply so far),
    "model" (the draft model of LoadOptions), or "" (one token at a time)."""
    grammar: Grammar | None = None
    """Only replies this grammar accepts (llama.cpp's grammar sampler, before the others)."""
    steering: Steering | None = None
    """Control vectors added to the residual stream from the prompt on (engine/steering.py)."""
