"""The Hub's GGUF repos for a text, most downloaded first."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Found:
    repo: str
    downloads: int
    likes: int
    updated: str

    def to_dict(self) -> dict:
        return asdict(self)


def search(text: str, limit: int = 20) -> list[Found]:
    """GGUF model repos whose name matches `text` (one request). Raises HubError."""
    from chatapp.models.hub.client import (
        api,
        check_reachable,
        hub_errors,
        offline,
        offline_error,
    )

    if offline():
        raise offline_error(f"a search for {text!r}")
    check_reachable(f"the search for {text!r}")
    with hub_errors(f"the search for {text!r}"):
        models = list(api().list_models(search=text, filter="gguf", sort="downloads", limit=limit))
    return [
        Found(
            m.id,
            int(getattr(m, "downloads", 0) or 0),
            int(getattr(m, "likes", 0) or 0),
            str(getattr(m, "last_modified", "") or "")[:10],
        )
        for m in models
    ]
