"""`chatapp steer make | list | meter`: concept vectors made from examples, kept per model, and
where a text lights one up."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from chatapp.commands.ask import started_engine, started_local, started_steering
from chatapp.engine import control_vector, steer_library
from chatapp.engine.protocol import LoadOptions
from chatapp.engine.steer_checks import check_name
from chatapp.engine.steering import Meter, Steering, SteeringError
from chatapp.textsafe import one_line, printable, token_display


def run_make(
    name: str,
    options: LoadOptions,
    *,
    positive: Path | None,
    negative: Path | None,
    method: str,
    at: str,
    replace: bool,
    as_json: bool,
) -> int:
    """Make a vector from two files of examples (or the built-in pair NAME) and keep it."""
    pair = _pair(name, positive, negative)
    target = steer_library.vector_path(options.model_path, name)
    if target.exists() and not replace:
        raise SteeringError(
            f"a vector named {name!r} is kept already ({target}); give --replace to make it again"
        )
    if method not in ("mean", "pca") or at not in ("mean", "last"):
        raise SteeringError("--method takes mean or pca, --at takes mean or last")
    engine = started_engine(options)
    try:
        vector = steer_library.make_vector(engine, pair, method, at)
    finally:
        engine.close()
    control_vector.write(target, vector, replace=replace)
    facts = {
        "name": name,
        "path": str(target),
        "model": options.model_path,
        "n_embd": vector.n_embd,
        "layers": len(vector.directions),
        "method": method,
        "at": at,
        "positive": len(pair.positive),
        "negative": len(pair.negative),
    }
    if as_json:
        _dump(facts)
    else:
        print(
            f"made {name!r}: {facts['layers']} directions {facts['n_embd']} wide ({method} of "
            f"{facts['positive']} positive and {facts['negative']} negative texts, "
            f"{'averaged over their tokens' if at == 'mean' else 'at their last token'}) "
            f"-> {target}"
        )
    return 0


def _pair(name: str, positive: Path | None, negative: Path | None) -> steer_library.Pair:
    check_name(name)
    if positive is not None and negative is not None:
        return steer_library.pair_from_files(name, positive, negative)
    if positive is not None or negative is not None:
        raise SteeringError("give both --positive FILE and --negative FILE (one text a line)")
    pair = steer_library.builtin_pair(name)
    if pair is None:
        built = ", ".join(steer_library.builtin_names())
        raise SteeringError(
            f"{name!r} is not a built-in pair ({built}): give --positive FILE and --negative FILE"
        )
    return pair


def chat_steering(
    options: LoadOptions, steer: tuple[list[tuple[str, float]], tuple[int, int]]
) -> Steering:
    """The Steering of `chat --steer`, checked before the app opens. A built-in pair not made
    for the model yet is made now, as `ask --steer` makes it, by a model loaded for that alone
    (the chat's own loads later, in the app); the note goes to stderr."""
    specs, layers = steer
    path = options.model_path
    if all(steer_library.find(path, n) or not steer_library.builtin_pair(n) for n, _ in specs):
        return steer_library.steering_for(specs, path, layers)
    print("note: making the built-in vectors not made for this model yet…", file=sys.stderr)
    engine = started_engine(options)
    try:
        return started_steering(engine, path, steer)
    finally:
        engine.close()


def run_list(model_path: str, as_json: bool) -> int:
    """The vectors kept for this model, then the built-in pairs not made for it yet."""
    try:
        is_file = Path(model_path).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL in it
        is_file = False
    if not is_file:
        print(
            f"error: {one_line(model_path)[:120]!r} is not a model file here: give a GGUF "
            "file, or a name `chatapp models` lists",
            file=sys.stderr,
        )
        return 2
    kept = steer_library.saved(model_path)
    made = {v.name for v in kept}
    todo = [n for n in steer_library.builtin_names() if n not in made]
    if as_json:
        _dump(
            {
                "model": model_path,
                "folder": str(steer_library.model_folder(model_path)),
                "vectors": [
                    {
                        "name": v.name,
                        "path": str(v.path),
                        "n_embd": v.n_embd,
                        "layers": v.layers,
                        "model_hint": v.model_hint,
                    }
                    for v in kept
                ],
                "builtin_not_made": todo,
            }
        )
        return 0
    print(f"vectors for {Path(model_path).name} ({steer_library.model_folder(model_path)}):")
    for v in kept:
        hint = f", made on {printable(v.model_hint)}" if v.model_hint else ""
        print(f"  {printable(v.name):<16} {v.layers} layers, {v.n_embd} wide{hint}")
    if not kept:
        print("  (none yet)")
    if todo:
        print(f"built-in pairs not made yet (`chatapp steer make NAME`): {', '.join(todo)}")
    return 0


def run_meter(
    name: str, text: str, options: LoadOptions, *, layer: int | None, as_json: bool
) -> int:
    """Each token of TEXT and how far its residual stream lies along the vector, per layer."""
    engine = started_local(options)
    notes: list[str] = []
    try:
        steering = steer_library.steering_for(
            [(name, 1.0)], options.model_path, engine=engine, notes=notes
        )
        path = steering.vectors[0].path
        found = engine.meter(text, control_vector.read(path))
    finally:
        engine.close()
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    n = found.projections.shape[1]
    if layer is not None and not 1 <= layer <= n:
        raise SteeringError(f"--layer takes 1..{n} for this model, not {layer}")
    if as_json:
        _dump(meter_dict(name, path, found))
    else:
        sys.stdout.write(meter_text(found, layer or middle_layer(found)))
    return 0


def meter_dict(name: str, path: str, found: Meter) -> dict:
    """The JSON of `chatapp steer meter --json`."""
    per_layer = _nanmean(found.projections[1:] if found.sink else found.projections, axis=0)
    return {
        "vector": name,
        "path": path,
        "first_is_sink": found.sink,
        "layers": list(range(1, found.projections.shape[1] + 1)),
        "mean": _num(found.mean()),
        "mean_per_layer": [_num(x) for x in per_layer],
        "tokens": [
            {"id": t.id, "text": t.text, "projection": [_num(x) for x in row]}
            for t, row in zip(found.tokens, found.projections, strict=True)
        ],
    }


def middle_layer(found: Meter) -> int:
    """The layer shown when none is chosen (Meter.middle_layer)."""
    return found.middle_layer


def meter_text(found: Meter, layer: int) -> str:
    """Per layer, the mean projection over the text; then each token's at `layer`."""
    rows = found.projections[1:] if found.sink else found.projections
    lines = ["mean projection per layer" + (" (the first token left out):" if found.sink else ":")]
    for i, value in enumerate(_nanmean(rows, axis=0), start=1):
        lines.append(f"  layer {i:>3}  {value:>10.3f}")
    lines.append(f"each token at layer {layer}:")
    for i, (tok, row) in enumerate(zip(found.tokens, found.projections, strict=True)):
        sink = (
            "  (the attention sink: its stream is huge whatever it says)"
            if i == 0 and found.sink
            else ""
        )
        lines.append(f"  {row[layer - 1]:>10.3f}  {token_display(tok.piece)!r}{sink}")
    return "\n".join(lines) + "\n"


def _nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    counts = (~np.isnan(a)).sum(axis=axis)
    sums = np.nansum(a, axis=axis)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _dump(payload: dict) -> None:
    json.dump(payload, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
