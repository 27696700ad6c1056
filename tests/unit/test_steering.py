"""Control vectors without a model: llama.cpp's GGUF format (read back by llama.cpp's own gguf
parser), the sums its loader makes, the sentences for bad input, history and the remote engine."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from fakes.engines import ScriptedEngine
from helpers import one_error_line, run_cli

from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.engine import control_vector, steer_library
from chatapp.engine.protocol import Failed, GenerateRequest, SteeringApplied
from chatapp.engine.remote.client import RemoteEngine
from chatapp.engine.steer_checks import parse_layers, parse_steer
from chatapp.engine.steering import (
    REMOTE_NOTE,
    Steering,
    SteeringError,
    SteeringUnavailable,
    SteerVector,
)
from chatapp.history.store import Store


def _vector(n_layers: int = 5, width: int = 8, seed: int = 0) -> control_vector.ControlVector:
    rng = np.random.default_rng(seed)
    directions = {i: rng.standard_normal(width).astype(np.float32) for i in range(1, n_layers)}
    return control_vector.ControlVector(directions, "llama")


class _LlamaGguf:
    """llama.cpp's own GGUF reader (ggml's gguf_init_from_file), as its control-vector loader
    (common_control_vector_load_one) opens a file: names, types, shapes and data."""

    class Params(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]

    def __init__(self) -> None:
        from llama_cpp import _ggml

        lib = self.lib = _ggml.libggml
        lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, self.Params]
        lib.gguf_init_from_file.restype = ctypes.c_void_p
        lib.gguf_get_n_tensors.restype = lib.gguf_find_key.restype = ctypes.c_int64
        lib.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
        lib.gguf_find_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.gguf_get_tensor_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.gguf_get_tensor_name.restype = ctypes.c_char_p
        lib.gguf_get_val_str.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.gguf_get_val_str.restype = ctypes.c_char_p
        lib.gguf_get_val_i32.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.gguf_get_val_i32.restype = ctypes.c_int32
        lib.ggml_get_tensor.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.ggml_get_tensor.restype = ctypes.c_void_p
        lib.ggml_get_data_f32.argtypes = [ctypes.c_void_p]
        lib.ggml_get_data_f32.restype = ctypes.POINTER(ctypes.c_float)
        lib.ggml_nelements.argtypes = [ctypes.c_void_p]
        lib.ggml_nelements.restype = ctypes.c_int64
        lib.ggml_n_dims.argtypes = [ctypes.c_void_p]
        lib.gguf_free.argtypes = lib.ggml_free.argtypes = [ctypes.c_void_p]

    def read(self, path) -> tuple[dict, dict[str, np.ndarray]]:
        lib = self.lib
        ctx = ctypes.c_void_p()
        g = lib.gguf_init_from_file(str(path).encode(), self.Params(False, ctypes.pointer(ctx)))
        assert g, "llama.cpp's gguf reader refused the file"
        try:
            keys = {}
            for key in ("general.architecture", "controlvector.model_hint"):
                keys[key] = lib.gguf_get_val_str(g, lib.gguf_find_key(g, key.encode())).decode()
            count = lib.gguf_find_key(g, b"controlvector.layer_count")
            keys["controlvector.layer_count"] = lib.gguf_get_val_i32(g, count)
            tensors = {}
            for i in range(lib.gguf_get_n_tensors(g)):
                name = lib.gguf_get_tensor_name(g, i)
                t = lib.ggml_get_tensor(ctx, name)
                assert lib.ggml_n_dims(t) == 1
                n = lib.ggml_nelements(t)
                data = np.ctypeslib.as_array(lib.ggml_get_data_f32(t), (n,))
                tensors[name.decode()] = data.copy()
            return keys, tensors
        finally:
            lib.gguf_free(g)
            lib.ggml_free(ctx)


def test_a_vector_made_meanwhile_under_the_same_name_is_kept(tmp_path):
    """Two makers of one name (`steer make` beside the Steer tab) both checked that the name
    was free before their minutes of reading examples: the one that finishes second, not
    asked to replace, gets one sentence and the first one's file stays as it was."""
    path = tmp_path / "vectors" / "calm.gguf"
    first, second = _vector(seed=1), _vector(seed=2)
    control_vector.write(path, first, replace=False)
    with pytest.raises(SteeringError) as caught:
        control_vector.write(path, second, replace=False)
    assert "nothing was overwritten" in str(caught.value) and "\n" not in str(caught.value)
    kept = control_vector.read(path)
    for i, d in first.directions.items():
        np.testing.assert_array_equal(kept.directions[i], d)
    assert sorted(p.name for p in path.parent.iterdir()) == ["calm.gguf"]  # (no temp left)
    control_vector.write(path, second)  # asked to replace (--replace): it does
    np.testing.assert_array_equal(control_vector.read(path).directions[1], second.directions[1])


def test_a_written_vector_is_read_by_llama_cpps_own_gguf_reader_as_its_loader_expects(tmp_path):
    vector = _vector(n_layers=30, width=576)
    path = tmp_path / "happy.gguf"
    control_vector.write(path, vector)
    keys, tensors = _LlamaGguf().read(path)
    assert keys == {
        "general.architecture": "controlvector",
        "controlvector.model_hint": "llama",
        "controlvector.layer_count": 29,
    }
    assert sorted(tensors) == sorted(f"direction.{i}" for i in range(1, 30))
    for i, d in vector.directions.items():
        np.testing.assert_array_equal(tensors[f"direction.{i}"], d)
    back = control_vector.read(path)  # and our own reader agrees
    assert back.model_hint == "llama" and back.n_embd == 576
    for i, d in vector.directions.items():
        np.testing.assert_array_equal(back.directions[i], d)


def test_strengths_and_files_sum_in_float32_as_llama_cpps_loader_sums_them():
    a, b = _vector(seed=1), _vector(n_layers=3, seed=2)
    got = control_vector.combined([(a, 0.7), (b, -1.3)], n_layers=5).reshape(4, 8)
    for layer in range(1, 5):  # common_control_vector_load: per file dst += src * s, then sum
        want = a.directions[layer] * np.float32(0.7)
        if layer in b.directions:
            want = want + b.directions[layer] * np.float32(-1.3)
        np.testing.assert_array_equal(got[layer - 1], want.astype(np.float32))


def test_mean_and_pca_directions_point_from_negative_to_positive_with_length_one():
    rng = np.random.default_rng(3)
    concept = rng.standard_normal((2, 16))
    negative = rng.standard_normal((6, 2, 16))
    positive = negative + 3 * concept + 0.1 * rng.standard_normal((6, 2, 16))
    for method in ("mean", "pca"):
        found = control_vector.directions_from(positive, negative, method)
        assert sorted(found) == [1, 2]
        for layer, d in found.items():
            assert abs(np.linalg.norm(d) - 1) < 1e-5
            cos = d @ concept[layer - 1] / np.linalg.norm(concept[layer - 1])
            assert cos > 0.99, (method, layer, cos)
    with pytest.raises(SteeringError, match="as many of each"):
        control_vector.directions_from(positive, negative[:5], "pca")


@pytest.mark.parametrize(
    "content, words",
    [
        (b"not a gguf at all", "does not start with the GGUF magic"),
        (b"GGUF\x03\x00\x00\x00", "truncated"),
    ],
)
def test_a_bad_file_is_one_sentence(tmp_path, content, words):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(SteeringError, match=words) as err:
        control_vector.read(path)
    assert "\n" not in str(err.value)


def test_a_model_file_is_not_taken_for_a_vector(model_path):
    with pytest.raises(SteeringError, match="is not a control vector: it holds the tensor"):
        control_vector.read(model_path)


def test_a_vector_of_another_width_is_refused_in_one_sentence(tmp_path, model_path):
    path = tmp_path / "wide.gguf"
    control_vector.write(path, _vector(n_layers=4, width=640))
    with pytest.raises(SteeringError) as err:
        steer_library.steering_for([(str(path), 2.0)], model_path)
    assert str(err.value) == (
        f"the vector 'wide' ({path}) is 640 wide (made on llama) but "
        "SmolLM2-135M-Instruct.Q4_1.gguf is 576 wide: make one for this model with "
        "`chatapp steer make wide`"
    )


@pytest.mark.parametrize(
    "text, words",
    [
        ("happy", "takes NAME:STRENGTH"),
        ("happy:lots", "is not a number"),
        ("happy:1e9", "from -4 to 4"),
        (":3", "takes NAME:STRENGTH"),
    ],
)
def test_bad_steer_options_are_one_sentence(text, words):
    with pytest.raises(SteeringError, match=words):
        parse_steer(text)


def test_steer_options_parse():
    assert parse_steer("happy:4") == ("happy", 4.0)
    assert parse_steer("./my:vec.gguf:-2.5") == ("./my:vec.gguf", -2.5)
    assert parse_layers("6-20") == (6, 20) and parse_layers("7") == (7, 7)
    with pytest.raises(SteeringError, match="1 <= START <= END"):
        parse_layers("9-3")


def test_the_cli_says_what_is_wrong_in_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    r = run_cli("ask", "hi", "--steer", f"{bad}:2")
    assert "does not start with the GGUF magic" in one_error_line(r)
    r = run_cli("ask", "hi", "--steer", "nothing-like-it:2")
    line = one_error_line(r)
    assert line.startswith("no vector named 'nothing-like-it' is kept for ")
    assert "built-in pairs need no files: formal, french, happy" in line
    r = run_cli("ask", "hi", "--server", "http://127.0.0.1:9", "--steer", "happy:2")
    assert one_error_line(r) == REMOTE_NOTE
    r = run_cli("steer", "make", "sad")
    assert "'sad' is not a built-in pair" in one_error_line(r)


def test_the_remote_engine_says_steering_needs_a_local_model():
    engine = RemoteEngine("http://127.0.0.1:9")
    with pytest.raises(SteeringUnavailable) as err:
        engine.set_steering(Steering((SteerVector("happy", "x.gguf", 2.0),)))
    assert str(err.value) == REMOTE_NOTE
    engine.info = object()  # as if started: the request itself is refused before any HTTP
    engine._stream_client = object()
    steered = GenerateRequest((), steering=Steering((SteerVector("happy", "x.gguf", 2.0),)))
    assert list(engine.generate(steered)) == [Failed(REMOTE_NOTE)]


class _SteeredScript(ScriptedEngine):
    """A script that reports a mid-reply steering change at token 3, as the worker does."""

    def generate(self, request):
        for event in super().generate(request):
            if getattr(event, "index", None) == 3 and self.steering is not None:
                yield SteeringApplied(self.steering, 3)
            yield event


def test_the_steering_is_kept_with_the_reply_in_history_changes_included(tmp_path):
    store = Store(tmp_path / "history.db")
    engine = _SteeredScript()
    engine.steering = None
    engine.start()
    session = ChatSession(ChatHistory(store, print))
    session.attach(engine, engine.info)
    start = Steering((SteerVector("happy", "/v/happy.gguf", 4.0),), 3, 20)
    session.steering = start
    engine.steering = start.with_strength("happy", -2.0)
    list(session.send("hello there"))
    reply = store.all_messages(session.history.conversation_id)[-1]
    assert reply.role == "assistant"
    happy = {"name": "happy", "path": "/v/happy.gguf"}
    assert reply.steering == {
        "vectors": [{**happy, "strength": 4.0}],
        "layers": [3, 20],
        "changes": [{"from_token": 3, "vectors": [{**happy, "strength": -2.0}]}],
    }
    assert Steering.from_dict(reply.steering).changes[0][1][0].strength == -2.0
    session.steering = engine.steering = None  # steering off, none changed: nothing recorded
    list(session.send("again"))
    assert store.all_messages(session.history.conversation_id)[-1].steering is None


def test_chat_steer_gives_the_app_s_session_its_steering(fresh_dirs, model_path, tmp_path):
    from chatapp.cli.chat_commands import steering_option
    from chatapp.engine.protocol import LoadOptions
    from chatapp.ui.launch import build_app

    options = LoadOptions(model_path=model_path)
    path = steer_library.vector_path(model_path, "happy")  # (made: test_steer_checks makes it)
    control_vector.write(path, _vector(n_layers=30, width=576))
    steering = steering_option(["happy:2"], "4-9", options, None)
    assert steering == Steering((SteerVector("happy", str(path), 2.0),), 4, 9)
    app = build_app(options, steering=steering)
    assert app.chat_screen.session.steering == steering
    with pytest.raises(SteeringError, match="goes past them"):
        steering_option(["happy:2"], "4-31", options, None)


def test_an_older_database_gains_the_steering_column(fresh_dirs):
    import sqlite3

    from chatapp.history.schema import MIGRATIONS, SCHEMA_VERSION

    path = fresh_dirs / "old.db"
    conn = sqlite3.connect(path)
    for step in MIGRATIONS[:3]:
        for statement in step:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO conversations (title, created, updated) VALUES ('t', 0, 0)")
    conn.execute(
        "INSERT INTO messages (conversation_id, seq, role, text, created, updated) "
        "VALUES (1, 1, 'assistant', 'hi', 0, 0)"
    )
    conn.commit()
    conn.close()
    store = Store(path)
    assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    (old,) = store.messages(1)
    assert old.text == "hi" and old.steering is None


def test_a_reply_begun_unsteered_keeps_a_change_made_while_it_was_written(tmp_path):
    """The Steer tab's first slider move lands in a reply begun with no vector: the change is
    kept with it all the same."""
    store = Store(tmp_path / "history.db")
    engine = _SteeredScript()
    engine.start()
    session = ChatSession(ChatHistory(store, print))
    session.attach(engine, engine.info)
    engine.steering = Steering((SteerVector("happy", "/v/happy.gguf", 4.0),))
    list(session.send("hello there"))
    kept = Steering.from_dict(store.all_messages(session.history.conversation_id)[-1].steering)
    assert kept.vectors == () and kept.changes[0][0] == 3
    assert kept.changes[0][1][0].strength == 4.0
