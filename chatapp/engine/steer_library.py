"""Where control vectors live (a folder per model file), the built-in pairs, and names to files."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from chatapp import jsonfile, paths
from chatapp.engine import control_vector
from chatapp.engine.steer_checks import check_file_layers, check_layers, check_name, is_name
from chatapp.engine.steering import Steering, SteeringError, SteerVector

MAX_TEXTS = 512
MAX_TEXT_CHARS = 4000


@dataclass(frozen=True)
class Pair:
    """Two lists of texts that differ in one concept: the vector points from negative to
    positive."""

    name: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    about: str = ""


@dataclass(frozen=True)
class SavedVector:
    """A control vector kept for a model, as `steer list` shows it."""

    name: str
    path: Path
    n_embd: int
    layers: int
    model_hint: str


def model_folder(model_path: str) -> Path:
    """The folder of this model file's vectors (its name without .gguf)."""
    return paths.steer_dir() / Path(model_path).stem


def vector_path(model_path: str, name: str) -> Path:
    check_name(name)
    return model_folder(model_path) / f"{name}.gguf"


def saved(model_path: str) -> list[SavedVector]:
    """The vectors kept for this model, by name (a file that does not read is left out, and
    so is one that no name gives: the .NAME-xxxx.gguf a `steer make` is writing)."""
    found = []
    folder = model_folder(model_path)
    for path in sorted(folder.glob("*.gguf")) if folder.is_dir() else ():
        if not is_name(path.stem):
            continue
        try:
            vector = control_vector.read(path)
        except SteeringError:
            continue
        found.append(
            SavedVector(path.stem, path, vector.n_embd, len(vector.directions), vector.model_hint)
        )
    return found


def builtin_names() -> list[str]:
    folder = resources.files("chatapp") / "steer_pairs"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def builtin_pair(name: str) -> Pair | None:
    """A pair shipped with chatapp (chatapp/steer_pairs/NAME.json), or None."""
    if name not in builtin_names():
        return None
    text = (resources.files("chatapp") / "steer_pairs" / f"{name}.json").read_text("utf-8")
    data = jsonfile.parse(text, where=f"the built-in pair {name}")
    return Pair(name, tuple(data["positive"]), tuple(data["negative"]), data.get("about", ""))


def pair_from_files(name: str, positive: Path, negative: Path) -> Pair:
    """A pair from two text files, one text a line (blank lines skipped), as
    llama-cvector-generator reads its --positive-file and --negative-file."""
    return Pair(name, _lines(positive), _lines(negative))


def _lines(path: Path) -> tuple[str, ...]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_TEXTS * MAX_TEXT_CHARS + 1)
    except OSError as exc:
        raise SteeringError(f"cannot read {path} ({exc.strerror or exc})") from None
    return examples(text, str(path))


def examples(text: str, where: str) -> tuple[str, ...]:
    """The examples of a text, one a line (blank lines skipped); `where` names it in errors."""
    lines = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not lines:
        raise SteeringError(f"{where} has no texts: write one example a line")
    if len(lines) > MAX_TEXTS or max(len(x) for x in lines) > MAX_TEXT_CHARS:
        raise SteeringError(
            f"{where} is too long: up to {MAX_TEXTS} texts of {MAX_TEXT_CHARS} characters each"
        )
    return lines


def find(model_path: str, name: str) -> Path | None:
    """The file a --steer NAME means for this model: a .gguf path as given, else the vector
    kept under that name (None: neither exists)."""
    if name.endswith(".gguf") or "/" in name or "\\" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise SteeringError(f"there is no control vector file {name}")
        return path
    path = vector_path(model_path, name)
    return path if path.is_file() else None


def missing_sentence(name: str, model_path: str) -> str:
    built = ", ".join(builtin_names())
    return (
        f"no vector named {name!r} is kept for {Path(model_path).name}; make it with "
        f"`chatapp steer make {name} --positive FILE --negative FILE` (built-in pairs need no "
        f"files: {built})"
    )


def check_vector(
    vector: control_vector.ControlVector,
    name: str,
    path: str,
    model: str,
    n_embd: int,
    n_layers: int,
) -> None:
    """SteeringError when the vector does not fit the model: another width than its residual
    stream, or a direction for a layer it does not have."""
    if n_embd and vector.n_embd != n_embd:
        made = f" (made on {vector.model_hint})" if vector.model_hint else ""
        raise SteeringError(
            f"the vector {name!r} ({path}) is {vector.n_embd} wide{made} but {model} is "
            f"{n_embd} wide: make one for this model with `chatapp steer make {name}`"
        )
    if n_layers:
        check_file_layers(vector.directions, name, path, n_layers, model)


def make_vector(engine, pair: Pair, method: str = "mean", at: str = "mean"):
    """A control vector from a pair, read from the model `engine` runs (LocalEngine.residuals:
    the residual stream of each text, averaged over its tokens or at its last one)."""
    positive = engine.residuals(list(pair.positive), at)
    negative = engine.residuals(list(pair.negative), at)
    directions = control_vector.directions_from(positive, negative, method)
    hint = engine.info.architecture if engine.info is not None else ""
    return control_vector.ControlVector(directions, hint)


def steering_for(
    specs: list[tuple[str, float]],
    model_path: str,
    layers: tuple[int, int] = (0, 0),
    engine=None,
    notes: list[str] | None = None,
) -> Steering:
    """The Steering that `--steer NAME:STRENGTH ...` asks for on this model file: each name a
    kept vector or a .gguf path, checked against the model's width and layer count. A built-in
    pair not yet made for the model is made with `engine` (when given) and kept; a sentence
    about it goes to `notes`. Raises SteeringError (one sentence)."""
    from chatapp.gguf.header import inspect

    card = inspect(model_path)
    model = Path(model_path).name
    start, end = layers
    check_layers(start, end, card.n_layers, model)
    chosen = []
    for name, strength in specs:
        path = find(model_path, name)
        pair = builtin_pair(name) if path is None else None
        if path is None and pair is not None and engine is not None:
            path = vector_path(model_path, name)
            control_vector.write(path, make_vector(engine, pair))
            if notes is not None:
                notes.append(f"made the vector {name!r} from the built-in pair: {path}")
        if path is None:
            raise SteeringError(missing_sentence(name, model_path))
        label = Path(name).stem if name.endswith(".gguf") else name
        vector = control_vector.read(path)
        check_vector(vector, label, str(path), model, card.n_embd, card.n_layers)
        chosen.append(SteerVector(label, str(path), strength))
    return Steering(tuple(chosen), start, end)
