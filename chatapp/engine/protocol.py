"""The Engine interface and the events a generation yields (plain, picklable dataclasses)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from chatapp.cpus import usable_cpus
from chatapp.engine.candidate_rows import Candidate as Candidate
from chatapp.engine.capabilities import Capabilities as Capabilities
from chatapp.engine.engine_errors import EngineCrashed as EngineCrashed
from chatapp.engine.engine_errors import EngineError as EngineError
from chatapp.engine.inspection import Inspection, InspectRequest
from chatapp.engine.request import ChatMessage as ChatMessage
from chatapp.engine.request import GenerateRequest as GenerateRequest
from chatapp.engine.request import Grammar as Grammar
from chatapp.engine.steering import Steering
from chatapp.engine.token_piece import TokenPiece as TokenPiece
from chatapp.metrics import GenerationStats
from chatapp.sampling import SamplerSettings


class StopReason(StrEnum):
    """Why a reply ended."""

    EOG = "eog"  # the model's end-of-generation token
    MAX_TOKENS = "max_tokens"
    STOP_STRING = "stop_string"
    CANCELLED = "cancelled"
    CONTEXT_FULL = "context_full"
    ERROR = "error"


ALL_GPU_LAYERS = -1
"""n_gpu_layers for "the whole model on the GPU" (llama.cpp's -ngl -1)."""


def gpu_layer_total(n_layers: int) -> int:
    """llama.cpp's GPU layer count for the whole model: its n_layers blocks plus the output
    layer (the head), so n_layers + 1. -ngl counts this way: n_layers leaves the head on the
    CPU, n_layers + 1 (or any more, or ALL_GPU_LAYERS) puts everything on the GPU."""
    return n_layers + 1


def resolved_gpu_layers(requested: int, n_layers: int) -> int:
    """The GPU layers a request means for a model of n_layers blocks: a negative count
    (ALL_GPU_LAYERS) or one past the total is the total (gpu_layer_total)."""
    total = gpu_layer_total(n_layers)
    return total if requested < 0 else min(requested, total)


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model file."""

    model_path: str
    n_ctx: int = 4096
    n_gpu_layers: int = ALL_GPU_LAYERS
    n_threads: int | None = None  # None = as `chatapp tune` found best here, else all usable CPUs
    n_batch: int = 512
    flash_attn: bool | None = None
    """None = choose: the tuned value, else off on the CPU (decode is faster without it
    there) and llama.cpp's own choice (auto) with GPU layers."""
    repack: bool | None = None
    """llama.cpp's extra CPU buffer types (AMX, CPU_REPACK weight repacking); None = on,
    unless they crashed on this machine and build (remembered) or the tune turned them off."""
    huge_pages: bool | None = None
    """Transparent huge pages for the worker's large buffers (engine/local/load/huge_pages.py);
    None = on where Linux offers them."""
    chat_template: str | None = None
    """A jinja chat template used instead of the file's own (None = the file's)."""
    draft_model: str | None = None
    """A smaller GGUF file with the same vocabulary, loaded beside the model to draft tokens
    for speculative decoding (requests with draft="model")."""
    adapt_threads: bool = True
    """Follow the machine while decoding: fewer threads while another program takes a core,
    back when it frees (engine/local/load/thread_governor.py). --threads N pins the count."""
    exact_batches: bool | None = None
    """On the CPU, run attention so that a batch's rows are bit for bit what one-token decodes
    give (flash attention over a Q8_0 K cache; llama_open.exact_batches_possible): drafted
    replies are then the replies decoded without drafts, at any thread count. None = from the
    first reply that asks for drafts (at load with a draft model); False = never. Not where
    flash attention is turned off."""

    @property
    def threads(self) -> int:
        return self.n_threads or usable_cpus()


@dataclass(frozen=True)
class ModelInfo:
    """What the engine reports once a model is loaded."""

    path: str
    n_vocab: int
    n_ctx: int
    n_ctx_train: int
    load_s: float
    gpu_offload_supported: bool
    n_gpu_layers: int  # layers actually on the GPU, of gpu_layer_total(n_layers)
    n_layers: int  # blocks (llama_model_n_layer), without the output layer
    n_threads: int
    has_chat_template: bool
    description: str = ""
    size_bytes: int = 0
    architecture: str = ""
    quant: str = ""
    n_params: int = 0
    flash_attn: bool = False  # as llama.cpp resolved it (read from its log)
    repack: bool = True  # extra CPU buffer types allowed
    extra_buffers: tuple[str, ...] = ()  # extra CPU buffer types in use (AMX, CPU_REPACK)
    huge_pages: bool = False  # the worker's large buffers got transparent huge pages
    weights_in_memory: bool = False  # read into (huge-paged) memory, not mapped from the file
    tuned: bool = False  # threads / flash attention / repack came from `chatapp tune`
    draft_model: str = ""  # path of the draft model loaded beside it ("" = none)
    exact_batches: bool = False  # batched rows equal one-token decodes (LoadOptions')
    n_embd: int = 0  # width of the residual stream (what a control vector must match)


def fills_the_cpu(info: ModelInfo, cores: int) -> bool:
    """Whether llama.cpp's threads run (some of) the model on the CPU on every one of the
    `cores`: then any other work on the machine, the UI's or the event pipe's, is taken from
    the model's speed."""
    return info.n_threads > 0 and info.n_gpu_layers < info.n_layers and info.n_threads >= cores


@dataclass(frozen=True)
class PromptEvaluated:
    """The prompt went through the template and prefill."""

    tokens: tuple[TokenPiece, ...]
    rendered: str  # the templated prompt text
    n_new: int  # tokens evaluated now
    n_reused: int  # tokens taken from the KV cache
    prefill_s: float
    t: float  # perf_counter in the engine when prefill ended


@dataclass(frozen=True)
class Token:
    """One sampled token of the reply."""

    index: int  # position in the reply, from 0
    id: int
    piece: bytes
    text: str  # decoded text delta (may be "" while a UTF-8 character is split)
    t: float  # perf_counter when sampled
    logprob: float | None = None  # log p of this token before the samplers
    candidates: Sequence[Candidate] = ()
    """Best first (top_n of them); from the local engine a Candidates, its rows made when
    first read."""
    drafted: bool = False  # speculative decoding: a draft token the model's sampling agreed with
    rejected: tuple[bytes, ...] = ()  # draft tokens proposed from this position, turned down
    seq: int = 0  # which of the alternatives decoded together (GenerateRequest.n_alternatives)


@dataclass(frozen=True)
class PrefillProgress:
    """A long prompt is being read: `done` of `total` new tokens evaluated so far."""

    done: int
    total: int
    elapsed_s: float


@dataclass(frozen=True)
class SettingsApplied:
    """New sampler settings took effect from token `index` of the reply."""

    settings: SamplerSettings
    index: int


@dataclass(frozen=True)
class SteeringApplied:
    """New steering took effect: token `index` of the reply is the first computed with it."""

    steering: Steering
    index: int


@dataclass(frozen=True)
class Finished:
    """The reply ended."""

    reason: StopReason
    text: str  # the full reply (stop string removed)
    stats: GenerationStats
    detail: str = ""
    alternatives: tuple[str, ...] = ()  # every reply's text when several were decoded together
    alternative_reasons: tuple[str, ...] = ()  # ... and why each ended


@dataclass(frozen=True)
class Notice:
    """Something the user should know that does not stop the reply (e.g. a fallback template)."""

    message: str


@dataclass(frozen=True)
class Failed:
    """The reply could not be produced; message is one sentence for the user."""

    message: str


Event = (
    PromptEvaluated
    | PrefillProgress
    | Token
    | SettingsApplied
    | SteeringApplied
    | Notice
    | Finished
    | Failed
)


@runtime_checkable
class Engine(Protocol):
    """A model that can chat. Local (child process) or remote (HTTP server)."""

    info: ModelInfo | None
    notes: list[str]
    """What start() had to do to get the model running (a GPU step-down, a CPU fallback)."""

    @property
    def capabilities(self) -> Capabilities:
        """What this engine can do (engine/capabilities.py); asked, never probed with hasattr."""
        ...

    @property
    def alive(self) -> bool:
        """Whether the engine can take a request now (started, and its worker not dead)."""
        ...

    def start(self) -> ModelInfo:
        """Load the model; raises EngineError (ModelFileError for a bad file) with a plain
        sentence on failure."""
        ...

    def generate(self, request: GenerateRequest) -> Iterator[Event]:
        """Stream the events of one reply. Ends with Finished or Failed."""
        ...

    def update_settings(self, settings: SamplerSettings) -> None:
        """New sampler settings for the reply in progress (from its next token). Thread-safe."""
        ...

    def set_steering(self, steering: Steering) -> None:
        """New steering for the reply in progress: the token after the next is the first
        computed with it (SteeringApplied says which). Thread-safe; raises SteeringError
        (SteeringUnavailable: this engine cannot steer)."""
        ...

    def cancel(self) -> None:
        """Stop the reply in progress within one token. Thread-safe."""
        ...

    def kill(self, reason: str = "it did not stop when asked") -> None:
        """Stop a reply that did not stop when cancelled, at once; it then fails with `reason`."""
        ...

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]:
        """Cut any text into tokens."""
        ...

    def count_tokens(self, messages: list[ChatMessage]) -> int | None:
        """Prompt tokens of these messages after the chat template; None if it cannot tell."""
        ...

    def inspect(self, request: InspectRequest) -> Inspection:
        """Look inside the model at one token (logit lens, attention, embedding neighbours:
        chatapp/engine/inspection.py); raises EngineError with a sentence when it cannot
        (InsideUnavailable: this engine has no such view)."""
        ...

    def close(self) -> None:
        """Free the model (ends the worker process)."""
        ...
