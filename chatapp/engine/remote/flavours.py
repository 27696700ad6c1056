"""What differs between OpenAI-compatible servers, one frozen Flavour per server kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from chatapp.sampling import Sampler


class Tokenize(StrEnum):
    """How a server cuts text into tokens, if it can."""

    NONE = "none"
    PIECES = "pieces"
    """llama-server's /tokenize, which gives each token's bytes (with_pieces)."""
    EXTRAS = "extras"
    """The llama-cpp-python server's /extras/tokenize (ids only) and /extras/detokenize."""


def _any_dict(answer: dict | None) -> bool:
    return isinstance(answer, dict)


def _filled_dict(answer: dict | None) -> bool:
    return isinstance(answer, dict) and bool(answer)


def _has_version(answer: dict | None) -> bool:
    return isinstance(answer, dict) and "version" in answer


@dataclass(frozen=True)
class Probe:
    """How start() tells a server of this flavour from the others: a request whose answer
    `accepts`, or an entry of /v1/models owned by `owned_by` or carrying `entry_key`. The
    request is tried first; a failed request (404, not JSON) only rules the flavour out."""

    method: str = ""
    path: str = ""
    body: dict | None = None
    accepts: Callable[[dict | None], bool] = _any_dict
    owned_by: str = ""
    entry_key: str = ""

    def ask(self, call: Callable[..., dict | None]) -> dict | None:
        """The probe request's answer when it says this flavour, else None (no request: None)."""
        if not self.path:
            return None
        answer = call(self.method, self.path, self.body)
        return answer if self.accepts(answer) else None

    def listed(self, entries: list[dict]) -> bool:
        """Whether the model list says this flavour."""
        return any(
            (self.owned_by and e.get("owned_by") == self.owned_by)
            or (self.entry_key and self.entry_key in e)
            for e in entries
        )


@dataclass(frozen=True)
class Flavour:
    """One kind of server: its parameter names, what it gives and how it is recognised."""

    kind: str
    """Its name in ModelInfo.description, RemoteEngine.kind and messages."""
    title: str
    """Its name in a sentence ("the llama-cpp-python server")."""
    probe: Probe | None = None
    """None: never probed (the generic server is what is left)."""
    renames: tuple[tuple[str, str], ...] = ()
    """Sampler keys it spells its own way (the sampler table's server name, its name)."""
    top_k_off: int = 0
    """The top_k that turns top-k off: 0 in llama.cpp and OpenAI's extension, -1 for vLLM."""
    logprobs: bool = True
    """Asked for log-probabilities; a server that refuses them is noticed and asked without."""
    post_sampling_probs: bool = False
    """Sends the probabilities after its samplers (llama-server's post_sampling_probs)."""
    tokenize: Tokenize = Tokenize.NONE
    apply_template: bool = False
    """Renders a chat prompt with its template (/apply-template): the prompt's tokens are exact."""
    grammar: bool = False
    """Takes a GBNF "grammar" in the request body."""
    keeps_props: bool = False
    """Its probe's answer is the server's /props (model facts read into ModelInfo)."""

    def takes(self, row: Sampler) -> bool:
        """Whether a request body to this server carries the sampler row's setting."""
        return row.server is not None and (not row.server_kinds or self.kind in row.server_kinds)

    def key(self, server_name: str) -> str:
        """Its name for a sampler key of the table."""
        return dict(self.renames).get(server_name, server_name)

    @property
    def can_tokenize(self) -> bool:
        return self.tokenize is not Tokenize.NONE


LLAMA_SERVER = Flavour(
    "llama-server",
    "llama-server",
    probe=Probe("GET", "/props", accepts=_filled_dict, owned_by="llamacpp"),
    post_sampling_probs=True,
    tokenize=Tokenize.PIECES,
    apply_template=True,
    grammar=True,
    keeps_props=True,
)
OLLAMA = Flavour("ollama", "Ollama", probe=Probe("GET", "/api/version", accepts=_has_version))
LLAMA_CPP_PYTHON = Flavour(
    "llama-cpp-python",
    "the llama-cpp-python server",
    probe=Probe("POST", "/extras/tokenize", {"input": "a"}),
    tokenize=Tokenize.EXTRAS,
    grammar=True,
)
VLLM = Flavour(
    "vllm",
    "vLLM",
    probe=Probe(owned_by="vllm", entry_key="max_model_len"),
    renames=(("repeat_penalty", "repetition_penalty"),),
    top_k_off=-1,
)
OPENAI = Flavour("openai", "an OpenAI-compatible server")
UNKNOWN = Flavour("unknown", "a server not yet asked")
"""Before start(): nothing is known, so nothing beyond a chat is assumed."""

FLAVOURS: tuple[Flavour, ...] = (LLAMA_SERVER, OLLAMA, LLAMA_CPP_PYTHON, VLLM, OPENAI)
"""In probing order; the last one is what any other server is."""

BY_KIND: dict[str, Flavour] = {f.kind: f for f in (*FLAVOURS, UNKNOWN)}


def flavour_of(kind: str | Flavour) -> Flavour:
    """The flavour of a kind name (a flavour is itself); an unknown name is the generic one."""
    return kind if isinstance(kind, Flavour) else BY_KIND.get(kind, OPENAI)


def detect(call: Callable[..., dict | None], entries: list[dict]) -> tuple[Flavour, dict]:
    """The server's flavour and its /props (else {}). Each flavour in turn: its probe
    request, then its model list; best effort, a probe that fails only rules it out."""
    for flavour in FLAVOURS:
        if flavour.probe is None:
            continue
        answer = flavour.probe.ask(call)
        if answer is not None:
            return flavour, (answer if flavour.keeps_props else {})
        if flavour.probe.listed(entries):
            return flavour, {}
    return OPENAI, {}


def grammar_servers() -> str:
    """The servers that take a grammar, for a sentence: "llama-server or the ... server"."""
    return " or ".join(f.title for f in FLAVOURS if f.grammar)
