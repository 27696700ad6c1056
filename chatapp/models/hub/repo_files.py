"""A Hub repo's GGUF files (sizes and sha256 from its metadata), split parts grouped, and the
rule that picks one for USER/REPO[:QUANT] (llama.cpp's: Q4_K_M, else Q8_0, else the first)."""

from __future__ import annotations

from dataclasses import dataclass

from chatapp.errors import HubError
from chatapp.models.hub.safe_names import check_commit, check_filename, check_sha256
from chatapp.models.sources.quant_names import is_projector, quant_from_name, split_part

DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")  # llama.cpp's `-hf` choice when no tag is given


@dataclass(frozen=True)
class Part:
    """One file on the Hub: a whole GGUF, or one part of a split one."""

    filename: str
    size: int
    sha256: str  # the LFS sha256 ("" for a file stored without LFS: then the git blob id is all)


@dataclass(frozen=True)
class RepoFile:
    """A model as the Hub holds it: one file, or the parts of a split GGUF (part 1 first)."""

    parts: tuple[Part, ...]

    @property
    def filename(self) -> str:
        return self.parts[0].filename

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def quant(self) -> str:
        return quant_from_name(self.filename)

    @property
    def is_projector(self) -> bool:
        return is_projector(self.filename)


@dataclass(frozen=True)
class Listing:
    """A repo's GGUF models at one commit."""

    repo: str
    commit: str
    files: tuple[RepoFile, ...]
    n_params: int = 0  # from the Hub's GGUF summary, when it has one
    gated: bool = False

    @property
    def models(self) -> list[RepoFile]:
        return [f for f in self.files if not f.is_projector]


def group_parts(parts: list[Part]) -> list[RepoFile]:
    """Whole files, and each split model as one RepoFile (its parts in order), by file name."""
    groups: dict[str, list[Part]] = {}
    for p in parts:
        split = split_part(p.filename)
        key = p.filename if split is None else p.filename[: -len("-00001-of-00001.gguf")]
        groups.setdefault(key, []).append(p)
    return [
        RepoFile(tuple(sorted(g, key=lambda p: p.filename)))
        for _, g in sorted(groups.items(), key=lambda kv: kv[0].lower())
    ]


def list_repo(repo: str, revision: str | None = None) -> Listing:
    """The repo's GGUF files from the Hub (one request). Raises HubError."""
    from chatapp.models.hub.client import api, check_reachable, hub_errors

    check_reachable(repo)
    with hub_errors(repo):
        info = api().model_info(repo, revision=revision, files_metadata=True)
    commit = check_commit(repo, info.sha or "")
    parts = [_part(repo, s) for s in info.siblings or [] if s.rfilename.lower().endswith(".gguf")]
    gguf = getattr(info, "gguf", None) or {}
    n_params = int(gguf.get("total", 0) or 0) if isinstance(gguf, dict) else 0
    return Listing(repo, commit, tuple(group_parts(parts)), n_params, bool(info.gated))


def _part(repo: str, sibling) -> Part:
    """A listed GGUF file, its name and sha256 checked: both become paths in the cache."""
    name = check_filename(repo, sibling.rfilename)
    lfs = sibling.lfs
    sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else "")
    size = sibling.size if sibling.size is not None else getattr(lfs, "size", 0) or 0
    return Part(name, int(size), check_sha256(repo, name, sha or ""))


def choose(files: list[RepoFile], repo: str, quant: str = "", filename: str = "") -> RepoFile:
    """The file USER/REPO[:QUANT] or USER/REPO:FILE.gguf names, as llama.cpp's `-hf` picks:
    the tag matched case-insensitively; no tag: Q4_K_M, else Q8_0, else the first model file.
    Raises HubError naming what the repo has."""
    models = [f for f in files if not f.is_projector]
    if filename:
        for f in files:
            if filename in (f.filename, f.filename.rsplit("/", 1)[-1]) or any(
                filename == p.filename for p in f.parts
            ):
                if f.is_projector:
                    raise HubError(_projector(repo, f.filename))
                return f
        raise HubError(f"{repo} has no file {filename}: {_have(models)}")
    if not files:
        raise HubError(f"{repo} has no GGUF files: chatapp runs GGUF models only")
    if not models:
        raise HubError(_projector(repo, files[0].filename) + " and the repo has no model file")
    if quant:
        wanted = quant.upper()
        exact = [f for f in models if f.quant == wanted]
        loose = [f for f in models if wanted in f.filename.upper()]
        if exact or loose:
            return (exact or loose)[0]
        if any(wanted in f.filename.upper() for f in files):
            raise HubError(_projector(repo, quant))
        raise HubError(f"{repo} has no {quant} file: {_have(models)}")
    for tag in DEFAULT_QUANTS:
        for f in models:
            if f.quant == tag:
                return f
    return models[0]


def _projector(repo: str, name: str) -> str:
    return (
        f"{repo}: {name} is a vision projector (mmproj), not a model to chat with: "
        "name one of the repo's model files"
    )


def _have(models: list[RepoFile]) -> str:
    quants = sorted({f.quant for f in models if f.quant})
    if quants:
        return "it has " + ", ".join(quants)
    return "its files are " + ", ".join(f.filename for f in models[:8])
