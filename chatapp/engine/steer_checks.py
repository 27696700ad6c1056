"""Steering's values checked where they enter (CLI, Steer tab, files): names, strengths, layers.

The one home of these limits: `--steer`, `--steer-layers`, `steer make NAME`, the Steer tab's
sliders and name box, and the layers a control-vector file holds are all checked here, each
against the real limit, with one sentence when a value is wrong.

Layers are llama.cpp's: a model of n_layers blocks (0 .. n_layers-1) has a control-vector slot
after blocks 1 .. n_layers-1 (llama_adapter_cvec makes none for block 0), so direction.N and
--steer-layers take 1 .. n_layers-1; a layer past that would silently do nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

from chatapp.engine.steering import SteeringError

STRENGTH_LIMIT = 4.0
"""The largest strength (either sign), for `--steer NAME:S` and the Steer tab's slider alike:
each direction has length 1 and is added after every chosen layer, so |S| = 4 already moves
the stream by 4 per layer; far above that the text falls apart."""
STRENGTH_STEP = 0.25
"""The slider's step (shift: ten of them)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = (
    "letters, digits, '_', '-' or '.' (up to 64, the first a letter or digit), without .gguf"
)


def is_name(name: str) -> bool:
    """Whether `name` can name a kept vector (its file NAME.gguf): the whole of it, so no
    trailing newline, no leading dot (a `steer make` in progress writes .NAME-xxxx.gguf)."""
    return _NAME.fullmatch(name) is not None and not name.endswith(".gguf")


def check_name(name: str) -> None:
    if not is_name(name):
        raise SteeringError(f"{name!r} cannot name a vector: use {NAME_RULE}")


def check_strength(strength: float, name: str) -> None:
    if not math.isfinite(strength) or abs(strength) > STRENGTH_LIMIT:
        raise SteeringError(
            f"the strength of {name!r} must be a number from -{STRENGTH_LIMIT:g} to "
            f"{STRENGTH_LIMIT:g} (the Steer tab's range), got {strength:g}"
        )


def parse_steer(text: str) -> tuple[str, float]:
    """NAME:STRENGTH (as `--steer happy:4` or `--steer ./calm.gguf:-2`) -> (name, strength)."""
    name, sep, value = text.rpartition(":")
    if not sep or not name.strip():
        raise SteeringError(f"--steer takes NAME:STRENGTH, e.g. happy:4, not {text!r}")
    try:
        strength = float(value)
    except ValueError:
        raise SteeringError(
            f"the strength in {text!r} is not a number; write NAME:STRENGTH, e.g. happy:-2.5"
        ) from None
    check_strength(strength, name.strip())
    return name.strip(), strength


def parse_layers(text: str) -> tuple[int, int]:
    """START-END (both inclusive, from 1) -> (start, end); the model's range is checked by
    check_layers once the model is known."""
    start, sep, end = text.strip().partition("-")
    try:
        pair = (int(start), int(end)) if sep else (int(start), int(start))
    except ValueError:
        raise SteeringError(f"--steer-layers takes START-END, e.g. 6-20, not {text!r}") from None
    if pair[0] < 1 or pair[1] < pair[0]:
        raise SteeringError(f"--steer-layers needs 1 <= START <= END, got {text!r}")
    return pair


def last_layer(n_layers: int) -> int:
    """The last layer llama.cpp adds a control vector after, on a model of n_layers blocks."""
    return max(n_layers - 1, 1)


def layers_text(n_layers: int) -> str:
    """The steerable range in words, for the sentences below."""
    return (
        f"layers 1 to {last_layer(n_layers)} (llama.cpp adds direction.N after block N of its "
        f"{n_layers}, counted from 0, and never after block 0)"
    )


def check_layers(start: int, end: int, n_layers: int, model: str) -> None:
    """SteeringError when START-END (0: llama.cpp's default end) leaves the model's range."""
    if (start or 1) > last_layer(n_layers) or end > last_layer(n_layers):
        raise SteeringError(
            f"{model} is steered after {layers_text(n_layers)}: --steer-layers "
            f"{start}-{end} goes past them"
        )


def check_file_layers(
    layers: Iterable[int], name: str, path: str | Path, n_layers: int, model: str
) -> None:
    """SteeringError when a control-vector file holds a direction for a layer the model does
    not have (llama.cpp would drop it without a word: a file made for a deeper model)."""
    beyond = sorted(n for n in layers if n > last_layer(n_layers))
    if beyond:
        raise SteeringError(
            f"the vector {name!r} ({path}) holds direction.{beyond[-1]}, but {model} is steered "
            f"after {layers_text(n_layers)}: it was made for a deeper model; make one for this "
            f"model with `chatapp steer make {name}`"
        )
