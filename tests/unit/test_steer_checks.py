"""Steering's values checked where they enter (engine/steer_checks.py): the layers llama.cpp
really steers, whole names only, one strength range for the CLI and the slider, a file that
holds a layer twice or one the model lacks, and the half-written files of a `steer make`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import one_error_line, run_cli

from chatapp.engine import control_vector, steer_library
from chatapp.engine.protocol import LoadOptions
from chatapp.engine.steer_checks import (
    STRENGTH_LIMIT,
    check_name,
    last_layer,
    parse_layers,
    parse_steer,
)
from chatapp.engine.steering import SteeringError
from chatapp.errors import UsageError
from chatapp.gguf.header import inspect, quant_name
from chatapp.models.sources.quant_names import split_part
from chatapp.models.specs import parse_spec

WIDTH = 576  # the bundled model's residual stream


def _vector(layers, seed: int = 0) -> control_vector.ControlVector:
    rng = np.random.default_rng(seed)
    return control_vector.ControlVector(
        {n: rng.standard_normal(WIDTH).astype(np.float32) for n in layers}, "llama"
    )


def _gguf(path, tensors: list[tuple[str, np.ndarray]]) -> None:
    """A control-vector file as gguf's own writer makes it, tensors in this order."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "controlvector")
    writer.add_string("controlvector.model_hint", "llama")
    writer.add_int32("controlvector.layer_count", len(tensors))
    for name, data in tensors:
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# ---- layers: 1 .. n_layers-1, as llama.cpp's llama_adapter_cvec has them ----------------------


def test_the_last_layer_llama_cpp_does_not_have_is_refused_naming_the_range(fresh_dirs, model_path):
    """The bundled model has 30 blocks (0..29): llama.cpp keeps a control-vector slot after
    blocks 1..29 only, so --steer-layers 1-30 would silently steer less than asked."""
    n_layers = inspect(model_path).n_layers
    assert n_layers == 30 and last_layer(n_layers) == 29
    path = fresh_dirs / "v.gguf"
    control_vector.write(path, _vector(range(1, 30)))
    ok = steer_library.steering_for([(str(path), 1.0)], model_path, (1, 29))
    assert (ok.layer_start, ok.layer_end) == (1, 29)
    for layers in ((1, 30), (30, 30), (5, 31)):
        with pytest.raises(SteeringError) as err:
            steer_library.steering_for([(str(path), 1.0)], model_path, layers)
        assert "layers 1 to 29" in str(err.value) and f"{layers[0]}-{layers[1]}" in str(err.value)
    r = run_cli("ask", "hi", "--steer", f"{path}:1", "--steer-layers", "1-30")
    assert "layers 1 to 29" in one_error_line(r)


def test_the_steer_tabs_layer_sliders_stop_at_the_last_steered_layer():
    from chatapp.ui.widgets.sampler import Slider
    from chatapp.ui.widgets.steer_rows import controls

    widgets = controls([], [], (0, 0), 0, n_layers=30)
    sliders = {}
    for w in widgets:
        for s in [w, *w.query(Slider)] if not isinstance(w, Slider) else [w]:
            if isinstance(s, Slider):
                sliders[s.id] = s
    assert sliders["steer-to"].high == sliders["steer-from"].high == 29
    assert sliders["steer-to"].value == 29  # (the default, "all": up to 29)


def test_a_file_with_a_layer_the_model_lacks_names_it_and_the_models_range(fresh_dirs, model_path):
    path = fresh_dirs / "deep.gguf"
    control_vector.write(path, _vector([*range(1, 30), 5000]))
    with pytest.raises(SteeringError) as err:
        steer_library.steering_for([(str(path), 1.0)], model_path)
    text = str(err.value)
    assert "direction.5000" in text and "layers 1 to 29" in text and "\n" not in text
    assert "width" not in text


# ---- one layer held twice: added, as llama.cpp's loader does ---------------------------------


def test_a_layer_held_twice_is_added_as_llama_cpps_loader_adds_it(tmp_path):
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(WIDTH).astype(np.float32) for _ in range(3))
    path = tmp_path / "twice.gguf"
    _gguf(path, [("direction.1", a), ("direction.2", c), ("direction.01", b)])
    vector = control_vector.read(path)
    assert sorted(vector.directions) == [1, 2]
    np.testing.assert_array_equal(vector.directions[1], a + b)
    strength = 0.7
    got = control_vector.combined([(vector, strength)], n_layers=4).reshape(3, WIDTH)
    s = np.float32(strength)
    # common_control_vector_load_one: dst starts at 0, then dst += src * s per tensor in order
    want = (np.zeros(WIDTH, np.float32) + a * s) + b * s
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], c * s)
    np.testing.assert_array_equal(got[2], np.zeros(WIDTH, np.float32))


@pytest.mark.parametrize("name", ["direction.1\n", "direction.٣", "direction.-1", "direction."])
def test_a_tensor_name_that_is_not_wholly_direction_n_is_refused(tmp_path, name):
    path = tmp_path / "odd.gguf"
    _gguf(path, [(name, np.ones(WIDTH, np.float32))])
    with pytest.raises(SteeringError, match="is not a control vector: it holds the tensor"):
        control_vector.read(path)


# ---- names: the whole of them ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["happy\n", "happy\r", ".happy-x1y2", "", "a" * 65, "x.gguf"])
def test_a_name_must_be_whole(name):
    with pytest.raises(SteeringError, match="cannot name a vector"):
        check_name(name)


def test_steer_make_refuses_a_name_with_a_newline(fresh_dirs, model_path):
    r = run_cli("steer", "make", "happy\n", "-m", model_path)
    assert "cannot name a vector" in one_error_line(r)
    assert not (fresh_dirs / "data" / "steer").exists()


def test_other_names_checked_by_pattern_take_the_whole_name_too():
    assert quant_name(None, "model.Q4_0\n.gguf") == ""
    assert quant_name(None, "model.Q4_0.gguf") == "Q4_0"
    assert split_part("m-00001-of-00002.gguf\n") is None
    assert split_part("m-00001-of-00002.gguf") == (1, 2)
    assert parse_spec("hf.co/user/model:Q4_0").repo == "user/model"
    with pytest.raises(UsageError, match="is not a Hugging Face model name"):
        parse_spec("hf.co/user/model\n:Q4_0")


# ---- strength: one range for --steer and the slider ------------------------------------------


def test_one_strength_range_for_the_cli_and_the_slider():
    from chatapp.ui.widgets.steer_rows import STRENGTH

    assert (STRENGTH.low, STRENGTH.high) == (-STRENGTH_LIMIT, STRENGTH_LIMIT)
    assert parse_steer(f"happy:{STRENGTH.high:g}") == ("happy", STRENGTH.high)
    assert parse_steer(f"happy:{STRENGTH.low:g}") == ("happy", STRENGTH.low)
    for too_much in (STRENGTH.high + STRENGTH.step, 9, -100, float("nan"), float("inf")):
        with pytest.raises(SteeringError) as err:
            parse_steer(f"happy:{too_much}")
        assert f"from -{STRENGTH_LIMIT:g} to {STRENGTH_LIMIT:g}" in str(err.value)
    r = run_cli("ask", "hi", "--steer", "happy:9")
    assert "must be a number from -4 to 4" in one_error_line(r)


@pytest.mark.parametrize("text", ["0-3", "3-2", "x", "1-", "-3", ""])
def test_bad_layer_ranges_are_one_sentence(text):
    with pytest.raises(SteeringError, match="--steer-layers"):
        parse_layers(text)


# ---- the vectors folder: only whole, valid names ---------------------------------------------


def test_steer_list_leaves_out_half_written_files_and_invalid_names(fresh_dirs, model_path):
    folder = steer_library.model_folder(model_path)
    control_vector.write(folder / "calm.gguf", _vector(range(1, 30)))
    for other in (".calm-k2j3x9.gguf", "bad name.gguf", "-x.gguf"):
        control_vector.write(folder / other, _vector(range(1, 30)))
    assert [v.name for v in steer_library.saved(model_path)] == ["calm"]
    r = run_cli("steer", "list", "-m", model_path, "--json")
    assert r.returncode == 0, r.stderr
    import json

    assert [v["name"] for v in json.loads(r.stdout)["vectors"]] == ["calm"]


# ---- chat --steer on a fresh data folder -----------------------------------------------------


@pytest.mark.slow
def test_chat_steer_makes_a_built_in_pair_on_first_use(fresh_dirs, model_path, capsys):
    from chatapp.cli.chat_commands import steering_option

    options = LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)
    assert steer_library.find(model_path, "happy") is None
    steering = steering_option(["happy:2"], "4-9", options, None)
    path = steer_library.vector_path(model_path, "happy")
    assert path.is_file() and steering.vectors[0].path == str(path)
    assert (steering.layer_start, steering.layer_end, steering.vectors[0].strength) == (4, 9, 2.0)
    assert "made the vector 'happy' from the built-in pair" in capsys.readouterr().err
