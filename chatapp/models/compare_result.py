"""What a comparison of GGUF files found: one RunResult per file in a CompareResult."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RunResult:
    """One file: what it cost and how close it stays to the reference."""

    path: str
    name: str
    quant: str
    size_bytes: int
    is_reference: bool = False
    load_s: float | None = None
    peak_rss_bytes: int | None = None  # VmHWM of the worker (mapped weights included)
    ttft_s: float | None = None
    prefill_tps: float | None = None
    decode_tps: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    text: str = ""  # the greedy reply
    same_prefix_tokens: int = 0  # leading reply tokens equal to the reference's reply
    top1_agreement: float | None = None  # share of positions with the reference's top token
    mean_kl: float | None = None  # mean KL(reference || this), nats per token
    perplexity: float | None = None  # on REFERENCE_TEXT, or the user's text (--text)
    # with --text, scored as llama-perplexity does (chunks of text_ctx, second halves):
    perplexity_err: float | None = None
    ppl_ratio: float | None = None  # PPL / the reference's PPL
    kld_err: float | None = None
    kld_p99: float | None = None
    same_top_err: float | None = None
    rms_dp: float | None = None
    scored_tokens: int = 0
    score_s: float | None = None
    busy_share: float | None = None
    """Share of all CPUs other programs used while its speed was measured (None: unknown)."""
    disturbed: bool = False  # ... enough to take time from its threads: its speed is unsure
    bytes_per_token: int = 0  # read per decoded token at the reply's mean depth
    decode_ceiling_tps: float | None = None  # this machine's read bandwidth / bytes_per_token
    ceiling_share: float | None = None  # decode_tps / decode_ceiling_tps
    error: str = ""  # the file could not be run
    note: str = ""  # something to know about the figures


@dataclass(frozen=True)
class CompareResult:
    """A whole comparison run."""

    created: str
    prompt: str
    tokens: int
    seed: int
    n_ctx: int
    n_threads: int
    text_tokens: int  # tokens of REFERENCE_TEXT (with the reference's tokenizer)
    reference: str
    runs: tuple[RunResult, ...]
    wall_s: float = 0.0
    mem_read_gbps: float | None = None  # the ceilings' bandwidth (measured here)
    saved_to: str = field(default="", compare=False)
    text_file: str = ""  # --text: the user's text, scored in chunks of text_ctx
    text_ctx: int = 0

    def to_dict(self) -> dict:
        return asdict(self)
