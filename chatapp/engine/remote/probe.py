"""Which of a server's models to use, and its ModelInfo (which server it is: flavours.py)."""

from __future__ import annotations

from chatapp.engine.protocol import EngineError, ModelInfo


def model_entries(listing: dict, base_url: str) -> list[dict]:
    """The usable entries of a /v1/models answer; EngineError when there are none."""
    data = listing.get("data")
    data = data if isinstance(data, list) else []
    entries = [e for e in data if isinstance(e, dict) and "id" in e]
    if not entries:
        raise EngineError(f"{base_url} lists no models at /v1/models")
    return entries


def pick_model(entries: list[dict], name: str | None) -> dict:
    """The entry named `name` (Ollama's ":latest" may be left out), or the first one."""
    if not name:
        return entries[0]
    for e in entries:
        if e["id"] in (name, f"{name}:latest"):
            return e
    names = ", ".join(str(e["id"]) for e in entries[:6])
    raise EngineError(f"the server has no model named {name!r}; it has: {names}")


def _int(value) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def model_info(base_url: str, kind: str, entry: dict, props: dict, load_s: float) -> ModelInfo:
    """ModelInfo from what the server tells: llama-server's /props and model `meta`, vLLM's
    max_model_len; 0 where it does not say. Nothing runs here, so GPU fields are 0/False."""
    found = entry.get("meta")
    meta: dict = found if isinstance(found, dict) else {}
    settings = props.get("default_generation_settings")
    settings = settings if isinstance(settings, dict) else {}
    n_ctx = settings.get("n_ctx") or meta.get("n_ctx") or entry.get("max_model_len")
    return ModelInfo(
        path=f"{base_url} :: {entry['id']}",
        n_vocab=_int(meta.get("n_vocab")),
        n_ctx=_int(n_ctx),
        n_ctx_train=_int(meta.get("n_ctx_train")),
        load_s=load_s,
        gpu_offload_supported=False,
        n_gpu_layers=0,
        n_layers=0,
        n_threads=0,
        has_chat_template=True,
        description=f"{kind} at {base_url}",
        size_bytes=_int(meta.get("size")),
        n_params=_int(meta.get("n_params")),
    )
