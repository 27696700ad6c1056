"""`chatapp inspect|fit|models|quantize|compare`: print, return an exit code, raise ChatappError."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from chatapp.commands.settings import resolve_model
from chatapp.engine.protocol import ALL_GPU_LAYERS, EngineError, LoadOptions
from chatapp.gguf.header import card_from_header, read_header
from chatapp.models import fit
from chatapp.models.card_rows import card_rows

COMPARE_FORMATS = ("table", "json", "csv", "markdown")


def format_card(card) -> str:
    """A model card as plain text."""
    text = "\n".join(f"{k:<16}{v}" for k, v in card_rows(card, with_path=True))
    return text + "".join(f"\nwarning         {w}" for w in card.warnings)


def inspect_cmd(path: str | Path, ctx: int = 4096, as_json: bool = False) -> int:
    """The model card of a GGUF file and its memory needs at `ctx`."""
    header = read_header(path)
    card = card_from_header(header)
    gpu, ram = fit.free_memory()
    report = fit.fit_report(fit.shape_from_header(header), ctx, -1, gpu, ram)
    if as_json:
        print(json.dumps({"card": card.to_dict(), "fit": report.to_dict()}, indent=2))
        return 0
    print(format_card(card))
    e = report.estimate
    print(
        f"{'memory':<16}{fit.gib(e.weights_bytes + e.kv_bytes + e.compute_bytes)} at ctx {ctx} "
        f"(weights {fit.gib(e.weights_bytes)}, KV {fit.gib(e.kv_bytes)}, "
        f"compute {fit.gib(e.compute_bytes)})"
    )
    print(f"{'fit':<16}{report.verdict}")
    return 0


def fit_cmd(
    path: str | Path | None = None,
    ctx: int = 4096,
    ngl: int = ALL_GPU_LAYERS,
    params_b: float | None = None,
    memory_gb: float | None = None,
    as_json: bool = False,
) -> int:
    """Memory fit of a model here, or a what-if table for an N-billion model vs a memory size.

    With a model, --memory stands for a GPU with that much free memory (GiB).
    """
    if ctx < 1:
        raise EngineError(f"the context size must be at least 1 token, got {ctx}")
    if memory_gb is not None and not 0 < memory_gb < math.inf:  # (nan: false)
        raise EngineError(f"--memory must be a positive number of GiB, got {memory_gb:g}")
    gpu, ram = fit.free_memory()
    out: dict = {}
    text = []
    if params_b is not None:
        if not 0 < params_b < math.inf:
            raise EngineError(f"--params must be a positive number of billions, got {params_b:g}")
        memory = int(memory_gb * fit.GIB) if memory_gb is not None else (gpu or ram or 0)
        if not memory:
            raise EngineError("no memory size is known here; give one with --memory GiB")
        ref, rows = fit.what_if(params_b, memory, ctx)
        out["what_if"] = {
            "params_b": params_b,
            "memory_bytes": memory,
            "n_ctx": ctx,
            "kv_shape_like": ref,
            "rows": [asdict(r) for r in rows],
        }
        text.append(fit.format_what_if(params_b, memory, ref, rows, ctx))
    if path is not None or params_b is None:
        header = read_header(resolve_model(path))
        if memory_gb is not None:
            gpu = int(memory_gb * fit.GIB)
        report = fit.fit_report(fit.shape_from_header(header), ctx, ngl, gpu, ram)
        out["fit"] = report.to_dict()
        text.append(fit.format_fit(report))
        out["devices"], devices_text = _devices(header, report, ctx)
        text.append(devices_text)
    print(json.dumps(out, indent=2) if as_json else "\n\n".join(text))
    return 0


def _devices(header, report: fit.FitReport, ctx: int) -> tuple[dict, str]:
    """Decode ceilings on common devices (and here, where measured) for a token at 1,024
    tokens of context (or the whole context, if shorter): why a GPU is a number."""
    from chatapp import machine
    from chatapp.models.device_speeds import device_rows, format_device_rows
    from chatapp.models.token_cost import model_cost

    depth = min(ctx, 1024) - 1
    token = model_cost(header).at(depth)
    e = report.estimate
    here = (machine.saved_ceilings() or {}).get("mem_read_gbps")
    total = e.weights_bytes + e.kv_bytes + e.compute_bytes
    rows = device_rows(token, total, float(here) if isinstance(here, int | float) else None)
    data = {"depth": depth, "bytes_per_token": token.bytes, "rows": [r.to_dict() for r in rows]}
    head = f"a token at depth {depth} reads {token.bytes / 1e6:.1f} MB"
    return data, f"{head}\n{format_device_rows(rows)}"


def models_cmd(
    dirs: Sequence[str | Path] = (), as_json: bool = False, config_dirs: Sequence[str | Path] = ()
) -> int:
    """List GGUF files: bundled, cached, in the given folders, in config's model_dirs (a
    missing one of those is a warning, a missing given folder an error) and the ones other
    tools keep (Hugging Face cache, Ollama, LM Studio, llama.cpp; what they skipped is a note)."""
    from chatapp.models.discovery import discover_with_notes, format_entries, missing_dirs

    for problem in missing_dirs(config_dirs):
        print(f"warning: model_dirs: {problem}", file=sys.stderr)
    entries, notes = discover_with_notes(dirs, config_dirs=config_dirs)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if as_json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print(format_entries(entries))
    return 0


def quantize_cmd(src: str | Path, types: Sequence[str], out_dir: str | Path | None = None) -> int:
    """Write one quantized copy of `src` per type (into the cache by default)."""
    from chatapp.models.quantize import normalize_type, quantize

    if not types:
        raise EngineError("give at least one --type, e.g. --type Q8_0")
    wanted = [normalize_type(t) for t in types]  # every name checked before any work
    warned = False
    for qtype in wanted:
        result = quantize(src, qtype, out_dir)
        if result.warning and not warned:
            print(f"warning: {result.warning}", file=sys.stderr)
            warned = True
        print(f"{qtype:<7} {result.output}  {fit.gib(result.size_bytes)}  {result.seconds:.1f} s")
    return 0


def compare_cmd(
    files: Sequence[str | Path],
    prompt: str | None = None,
    tokens: int = 64,
    reference: str | Path | None = None,
    fmt: str = "table",
    options: LoadOptions | None = None,
    text: str | Path | None = None,
    text_ctx: int = 512,
) -> int:
    """Run each file with the same greedy prompt; speed, memory and quality vs a reference
    (with `text`: scored on that file as llama-perplexity does, chunks of `text_ctx`).

    `options` gives the GPU layers, threads, flash attention and repack of every run (the model
    path and context size are compare's own)."""
    from chatapp.models import compare, compare_format
    from chatapp.progress import bars

    if fmt not in COMPARE_FORMATS:
        raise EngineError(f"unknown format '{fmt}'; choose one of {', '.join(COMPARE_FORMATS)}")
    if len(files) + (reference is not None) < 2:
        raise EngineError("compare needs at least two GGUF files")
    if tokens < 2:
        raise EngineError(f"--tokens must be at least 2, got {tokens}")
    with bars("tokens") as bar:
        result = compare.compare(
            files,
            prompt=prompt or compare.DEFAULT_PROMPT,
            tokens=tokens,
            reference=reference,
            options=options,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
            text_file=text,
            text_ctx=text_ctx,
            text_progress=bar,
        )
    render = {
        "table": compare_format.format_table,
        "json": compare_format.to_json,
        "csv": compare_format.to_csv,
        "markdown": compare_format.to_markdown,
    }[fmt]
    print(render(result))
    print(f"saved to {result.saved_to}", file=sys.stderr)
    return 1 if any(r.error for r in result.runs) else 0
