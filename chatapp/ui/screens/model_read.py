"""What the model picker would load: a file's card and memory shape, or a Hub name to get."""

from __future__ import annotations

from dataclasses import dataclass, replace

from chatapp.errors import ModelFileError
from chatapp.gguf.header import ModelCard, card_from_header, read_header
from chatapp.models import fit
from chatapp.models.resolve import local_model
from chatapp.models.specs import ModelSpec


@dataclass(frozen=True)
class Picked:
    """The file the picker would load: its card and shape, or why it cannot be loaded, or
    the Hub model to download first. `asked` is what was picked (a row's path, or typed)."""

    path: str
    card: ModelCard | None = None
    shape: fit.ModelShape | None = None
    error: str = ""
    asked: str = ""
    download: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not self.asked:
            object.__setattr__(self, "asked", self.path)


def read_model(path: str) -> Picked:
    """Card and memory shape of one file from its header (never raises)."""
    try:
        header = read_header(path)
    except ModelFileError as exc:
        return Picked(path, error=str(exc))
    return Picked(path, card_from_header(header), fit.shape_from_header(header))


def read_named(text: str) -> Picked:
    """A typed path or name (USER/REPO[:QUANT], ollama:NAME[:TAG]) with no network: the file
    it stands for, or the Hub model it would download (never raises)."""
    named = local_model(text)
    if named.download is not None:
        return Picked("", asked=text, download=named.download)
    if named.error:
        return Picked("", asked=text, error=named.error)
    return replace(read_model(named.path), asked=text)
