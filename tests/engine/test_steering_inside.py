"""Steering inside the worker, in this process: the vector lands where llama.cpp says (the logits
move as numpy expects), steering off calls nothing, and a built-in pair moves the model's
preferences both ways on texts it was not made from."""

from __future__ import annotations

import numpy as np
import pytest

from chatapp.engine import control_vector, steer_library
from chatapp.engine.local.inside import context_steering
from chatapp.engine.local.inside.inspector import Inspector
from chatapp.engine.local.load import cpu_backend
from chatapp.engine.local.loop import serving_model
from chatapp.engine.protocol import LoadOptions
from chatapp.engine.steering import Steering, SteerVector

pytestmark = pytest.mark.slow  # a real model, loaded in this process


@pytest.fixture(scope="module")
def worker(model_path, engine):
    # Loaded as the engine loads it here (the `engine` fixture's start found out whether
    # llama.cpp's extra CPU buffers crash on this CPU: here that would take pytest down).
    options, _ = cpu_backend.choose(LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0))
    return serving_model.ServingModel(options)


@pytest.fixture(scope="module")
def inspector(worker):
    found = Inspector(worker)
    yield found
    found.close()


def _logits(w, tokens, steer: Steering | None) -> np.ndarray:
    assert w.steering.begin(steer) == ""
    w.lib.llama_memory_clear(w.mem, True)
    w.kv_tokens = []
    assert w.decode(tokens) == 0
    return w.logits(-1).astype(np.float64).copy()


def test_a_vector_after_the_last_layer_moves_the_logits_as_the_output_head_says(
    worker, inspector, tmp_path
):
    # direction.N is added after block N (from 0), so direction.(n-1) after the last block:
    # the logits are then the output head of (last residual + s * v), which numpy computes
    # from the residual the inspector reads and the file's norm and output weights.
    w = worker
    n = w.info.n_layers
    tokens = w.tokenize("The capital of France is", add_bos=w.add_bos)
    inspector.capture(tokens)
    h = inspector.reader.residual[n - 1].copy()
    rng = np.random.default_rng(0)
    v = rng.standard_normal(w.info.n_embd).astype(np.float32)
    v /= np.linalg.norm(v)
    path = tmp_path / "last.gguf"
    control_vector.write(path, control_vector.ControlVector({n - 1: v}, "llama"))
    plain = _logits(w, tokens, None)
    lens = inspector.weights.lens
    base = lens(h[None])[0][0].astype(np.float64)
    strength = 0.1 * float(np.linalg.norm(h))
    for s in (strength, -strength):
        moved = _logits(w, tokens, Steering((SteerVector("v", str(path), s),)))
        want = lens((h + np.float32(s) * v)[None])[0][0].astype(np.float64) - base
        got = moved - plain
        assert np.corrcoef(want, got)[0, 1] > 0.95, s
        assert 0.8 < np.linalg.norm(got) / np.linalg.norm(want) < 1.25, s
    # one layer earlier it passes through the last block first: not what the head alone says
    early = tmp_path / "early.gguf"
    control_vector.write(early, control_vector.ControlVector({n - 2: v}, "llama"))
    moved = _logits(w, tokens, Steering((SteerVector("v", str(early), strength),)))
    want = lens((h + np.float32(strength) * v)[None])[0][0].astype(np.float64) - base
    assert np.corrcoef(want, moved - plain)[0, 1] < 0.9
    _logits(w, tokens, None)


def test_steering_off_never_calls_llama_cpp_and_a_vector_is_set_once(worker, tmp_path, monkeypatch):
    calls = []
    real = worker.lib.llama_set_adapter_cvec

    def counting(ctx, data, *rest):
        calls.append(data is not None)
        return real(ctx, data, *rest)

    monkeypatch.setattr(worker.lib, "llama_set_adapter_cvec", counting)
    context = context_steering.ContextSteering(worker)  # (the context has no vector: cleared above)
    path = tmp_path / "v.gguf"
    width = worker.info.n_embd
    control_vector.write(path, control_vector.ControlVector({1: np.ones(width, np.float32)}))
    on = Steering((SteerVector("v", str(path), 2.0),))
    assert context.begin(None) == "" and context.begin(Steering()) == ""
    assert calls == []  # steering off: nothing called, nothing added to the graph
    assert context.begin(on) == "" and context.begin(on) == ""
    assert calls == [True]  # set once, then left as it is
    assert context.begin(None) == ""
    assert calls == [True, False]  # cleared once


HELD_OUT = (  # not among the pair's texts: prompts, and continuations happy / sad
    ("Yesterday after work,", " I felt wonderful and laughed all evening.",
     " I felt terrible and cried all evening."),
    ("When I read the letter,", " I was so happy that I smiled.", " I was so sad that I wept."),
    ("After the long trip home,", " everything seemed bright and hopeful.",
     " everything seemed dark and hopeless."),
)  # fmt: skip


def happy_margin(w, path: str, strength: float) -> float:
    """The measure: how much more likely the model finds the happy continuation than the sad
    one after each held-out prompt (mean log-probability difference, nats), steered."""
    assert w.steering.begin(Steering((SteerVector("happy", path, strength),))) == ""
    margins = []
    for prompt, happy, sad in HELD_OUT:
        margins.append(_continuation(w, prompt, happy) - _continuation(w, prompt, sad))
    assert w.steering.begin(None) == ""
    return float(np.mean(margins))


def _continuation(w, prompt: str, text: str) -> float:
    head = w.tokenize(prompt, add_bos=w.add_bos)
    tokens = head + w.tokenize(text, add_bos=False)
    rows = w.score(tokens)
    return float(sum(rows[i - 1, tokens[i]] for i in range(len(head), len(tokens))))


def test_the_happy_pair_moves_the_model_both_ways_on_texts_it_was_not_made_from(
    worker, inspector, tmp_path
):
    pair = steer_library.builtin_pair("happy")
    made = [
        context_steering.residuals(worker, inspector, list(t), "mean")
        for t in (pair.positive, pair.negative)
    ]
    path = tmp_path / "happy.gguf"
    control_vector.write(
        path, control_vector.ControlVector(control_vector.directions_from(*made, "mean"))
    )
    margins = {s: happy_margin(worker, str(path), s) for s in (-4.0, 0.0, 4.0)}
    print("happy margin (nats) at -4, 0, +4:", margins)
    assert margins[4.0] > margins[0.0] + 1 and margins[-4.0] < margins[0.0] - 1
