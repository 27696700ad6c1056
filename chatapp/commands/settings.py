"""How every command resolves its options: what is given, else config.toml, else defaults."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from chatapp.engine.protocol import LoadOptions
from chatapp.errors import UsageError
from chatapp.sampling import SamplerSettings


def resolve_model(model: str | Path | None) -> str:
    """The model file to use: a path as given, a name (USER/REPO[:QUANT], ollama:NAME[:TAG])
    found on disk or pulled, else (None) the bundled default; a blank one is refused. The one
    place commands resolve a model."""
    if model is None:
        from chatapp.models.bundled import default_model

        return str(default_model())
    if not str(model).strip():  # (`-m "$MODEL"` with MODEL unset: never the bundled one)
        raise UsageError(
            "the model is empty: give a GGUF file or a name (USER/REPO[:QUANT], "
            "ollama:NAME[:TAG]), or leave the option out for the default"
        )
    from chatapp.models.resolve import resolve_spec

    return str(resolve_spec(str(model)))


def load_options(
    model: str | Path | None,
    *,
    ctx: int | None = None,
    ngl: int | None = None,
    threads: int | None = None,
    batch: int | None = None,
    flash_attn: bool | None = None,
    repack: bool | None = None,
    config=None,
    find_model: bool = True,
    draft_model: str | None = None,
) -> LoadOptions:
    """How every command loads a model: what is given here (None = not given), else
    config.toml, else LoadOptions' own defaults. With find_model=False (a server, compare) the
    model path is left as given instead of falling back to config's, then the bundled, model."""
    from chatapp.config import Config

    config = config or Config()
    if not find_model:
        path = str(model or "")
    else:
        if model is None and config.default_model:
            model = config.default_model
        path = resolve_model(model)
    given = {
        "n_ctx": ctx or config.n_ctx,
        "n_gpu_layers": config.n_gpu_layers if ngl is None else ngl,
        "n_threads": threads or config.threads,
        "n_batch": batch,
        "flash_attn": config.flash_attn if flash_attn is None else flash_attn,
        "repack": config.repack if repack is None else repack,
        "huge_pages": config.huge_pages,
        "exact_batches": config.exact_batches,
        "draft_model": draft_model,
    }
    options = LoadOptions(model_path=path, **{k: v for k, v in given.items() if v is not None})
    return replace(options, n_batch=min(options.n_batch, options.n_ctx))


def draft_choice(value: str | None, config=None) -> tuple[str, str | None]:
    """Speculative decoding from --draft, else config's `draft` (config.draft_source)."""
    from chatapp.config import Config, draft_source

    raw = (config or Config()).draft if value is None else value
    kind, path = draft_source(raw)
    if kind == "model":  # a draft model may be named as any model is
        path = resolve_model(raw.strip())
    return kind, path


def sampler_settings(config=None, **given: object) -> SamplerSettings:
    """Sampler settings: the options given (None = not given), else config's [sampler], else
    SamplerSettings' defaults."""
    from chatapp.config import Config

    base = (config or Config()).sampler
    return base.with_(**{k: v for k, v in given.items() if v is not None})


def read_config():
    """config.toml as a Config; each problem is one warning line on stderr."""
    from chatapp.config import load_config
    from chatapp.textsafe import for_stream, one_line

    config, problems = load_config()
    for problem in problems:
        print(for_stream(sys.stderr)(one_line(f"warning: {problem}")), file=sys.stderr)
    return config


def checked_url(server: str) -> str:
    """--server's address as given, once it is one (config.url_problem; no scheme: http://,
    as the client reads it)."""
    from chatapp.config import url_problem

    url = server.strip()
    problem = url_problem(url if "://" in url else f"http://{url}")
    if problem:
        raise UsageError(f"--server {server!r} {problem}")
    return server


def _looks_like_url(text: str) -> bool:
    return any(c in text for c in ":/.")


def resolve_server(
    server: str | None, api_key_env: str | None, model_name: str | None, config
) -> tuple[str | None, dict]:
    """--server as a URL and the remote engine's options: a [servers.NAME] name expands to its
    url, api_key_env and model_name (options given on the command line win); anything that
    looks like an address is used as it is; any other bare word is an error naming the
    configured servers."""
    remote = {"api_key_env": api_key_env, "model_name": model_name}
    if server is None:
        return None, remote
    named = config.servers.get(server.strip())
    if named is not None:
        remote = {
            "api_key_env": api_key_env or named.api_key_env,
            "model_name": model_name or named.model_name,
        }
        return named.url, remote
    if _looks_like_url(server):
        return checked_url(server), remote
    names = ", ".join(sorted(config.servers))
    known = (
        f"configured servers: {names}"
        if names
        else "no servers are configured ([servers.NAME] in config.toml)"
    )
    raise UsageError(
        f"unknown server {server!r}: give a URL such as http://127.0.0.1:8080 or a name "
        f"from config.toml ({known})"
    )
