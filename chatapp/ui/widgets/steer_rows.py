"""The Steer tab's pieces: its sliders (strength, layers; their ranges from steer_checks),
its words, and the sentence an error becomes."""

from __future__ import annotations

from rich.text import Text
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Button, Select, Static

from chatapp.engine.protocol import Engine
from chatapp.engine.steer_checks import STRENGTH_LIMIT, STRENGTH_STEP, last_layer
from chatapp.engine.steering import SteerVector
from chatapp.errors import ChatappError
from chatapp.sampling import Bound, Sampler
from chatapp.ui.widgets.sampler import Slider

STRENGTH = Bound(
    -STRENGTH_LIMIT, STRENGTH_LIMIT, STRENGTH_STEP,
    "S times the vector's direction is added to every token's residual stream after each "
    "chosen layer (0: the model as it is)",
)  # fmt: skip
ABOUT = (
    "A slider adds S times a concept's direction to the residual stream after each chosen "
    "layer, from the next token on (F1 explains)."
)


def steerable(engine: Engine | None) -> bool:
    """Whether this engine can make, apply and meter vectors, as it declares: a local model
    (a server's layers are not ours to add to)."""
    return engine is not None and engine.capabilities.steering


def sentence(text: str) -> str:
    """An error as a sentence: a capital first letter (a name in it is quoted, never first
    bare), and a full stop unless it ends in punctuation already."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text[-1:] in ".…:!?" else ".")


def failure(exc: Exception) -> str:
    """What went wrong in an engine call, as words: chatapp's own errors are sentences
    already; anything else (a crashed worker's pipe, a file gone) is named by its kind."""
    if isinstance(exc, ChatappError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"


def strength_row(name: str) -> Sampler:
    return Sampler(name, STRENGTH, name[:8])


def layer_row(name: str, label: str, top: int, what: str) -> Sampler:
    return Sampler(name, Bound(1, max(top, 1), 1, what), label, whole=True)


def controls(
    choices: list[tuple[Text, str]],
    vectors: list[SteerVector],
    layer_range: tuple[int, int],
    meter_layer: int,
    n_layers: int,
) -> list[Widget]:
    """The tab's controls: the picker, a slider per vector in use, the layer range (1 to the
    last layer llama.cpp steers) and the meter's layer."""
    top = last_layer(n_layers)  # (llama.cpp steers after layers 1 .. n_layers-1)
    start, end = layer_range[0] or 1, layer_range[1] or top
    widgets: list[Widget] = [
        Horizontal(
            Button("Add", id="steer-add", compact=True),
            Select(choices, prompt="pick a vector", id="steer-choice", compact=True),
            id="steer-pick",
            classes="steer-row",
        )
    ]
    for i, v in enumerate(vectors):
        slider = Slider(v.name, v.strength, id=f"steer-strength-{i}", row=strength_row(v.name))
        slider.tooltip = f"{v.name}: {STRENGTH.help} (Delete takes it off)"
        widgets.append(slider)
    if not vectors:
        widgets.append(Static("(no vector in use)", classes="steer-title"))
    widgets += [
        Static("added after the layers:", classes="steer-title"),
        Slider("from", start, id="steer-from", row=layer_row("from", "from", top, "first")),
        Slider("to", end, id="steer-to", row=layer_row("to", "to", top, "last layer")),
        Horizontal(
            Button("Meter (m)", id="steer-meter", compact=True),
            Slider(
                "meter at",
                meter_layer or (top + 1) // 2,
                id="steer-meter-layer",
                row=layer_row("meter at", "layer", top, "the layer coloured"),
            ),
            classes="steer-row",
        ),
    ]
    return widgets
