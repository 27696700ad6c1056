"""How a model is named: a path, USER/REPO[:QUANT] (Hugging Face), or ollama:NAME[:TAG]."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from chatapp import paths
from chatapp.errors import UsageError

HF_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # whole names: fullmatch
_LOOKS_LIKE_PATH = ("/", "./", "../", "~")
_SENTENCE_END = re.compile(r"\.\s+([A-Z])")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name. kind is "path", "hf" or "ollama"."""

    kind: str
    text: str
    path: Path | None = None  # kind "path"
    repo: str = ""  # kind "hf": USER/REPO
    quant: str = ""  # kind "hf": the QUANT tag as typed ("" = llama.cpp's rule)
    filename: str = ""  # kind "hf": a file named with :FILE.gguf
    name: str = ""  # kind "ollama": NAME (with its namespace and host when given)
    tag: str = ""  # kind "ollama": TAG ("latest" when not given)

    def __str__(self) -> str:
        return self.text


def _ollama(text: str) -> ModelSpec:
    rest = text.removeprefix("ollama:").strip()
    if not rest:
        raise UsageError("ollama: needs a model name, e.g. ollama:llama3.2 or ollama:qwen3:4b")
    name, _, tag = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
    return ModelSpec("ollama", text, name=name, tag=tag or "latest")


def hub_refuses(repo: str) -> str:
    """Why huggingface_hub would refuse `repo` as a repo id ("" when it takes it), as it says
    it ("cannot have -- or .. in repo_id"): its own check, so that no name passes here that
    it refuses later."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        why = str(exc).rpartition(": ")[0] or str(exc)  # (without the repo it quotes)
        why = _SENTENCE_END.sub(lambda m: "; " + m.group(1).lower(), why.rstrip("."))
        return why[:1].lower() + why[1:]
    return ""


def _hf(text: str, body: str) -> ModelSpec:
    repo, _, tail = body.partition(":")
    repo = repo.strip("/")
    why = "" if _REPO.fullmatch(repo) else "no USER/REPO"
    why = why or hub_refuses(repo)
    if why:
        raise UsageError(
            f"{text!r} is not a Hugging Face model name ({why}): give USER/REPO, "
            "USER/REPO:QUANT or USER/REPO:FILE.gguf"
        )
    if tail.lower().endswith(".gguf"):
        return ModelSpec("hf", text, repo=repo, filename=tail)
    return ModelSpec("hf", text, repo=repo, quant=tail)


def parse_spec(text: str) -> ModelSpec:
    """Parse what -m / a model argument took. A file that exists is always a path; so is
    anything that starts like a path or names a .gguf file outside USER/REPO:FILE.gguf."""
    text = text.strip()
    if text.startswith("ollama:"):
        return _ollama(text)
    for prefix in HF_PREFIXES:
        if text.startswith(prefix):
            return _hf(text, text[len(prefix) :])
    path = paths.expand_user(text)
    head = text.partition(":")[0]
    if (
        _exists(path)
        or text.startswith(_LOOKS_LIKE_PATH)
        or head.lower().endswith(".gguf")
        or not _REPO.fullmatch(head)
    ):
        return ModelSpec("path", text, path=path)
    return _hf(text, text)


def _exists(path: Path) -> bool:
    """Whether a file or folder is there; a name the system cannot even look up (longer than
    a file name may be) is none, and is read as a path: its error then names it."""
    try:
        return path.exists()
    except OSError:
        return False
