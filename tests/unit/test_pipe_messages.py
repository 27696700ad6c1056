"""The worker's pipe messages are types: frozen, pickled whole, dispatched on their type."""

from __future__ import annotations

import dataclasses
import pickle
import threading
from multiprocessing import Pipe

import pytest

from chatapp.engine.local import pipe_messages as pm
from chatapp.engine.local.process import side_pipe, worker
from chatapp.engine.protocol import Failed, GenerateRequest
from chatapp.sampling import SamplerSettings

SAMPLES = [
    pm.Generate(GenerateRequest(()), 1.5),
    pm.Score([1, 2, 3]),
    pm.StartAutotune({"free": {"threads": True}}),
    pm.NewSettings(SamplerSettings()),
    pm.Cancel(),
    pm.Close(),
    pm.WarmingUp(),
    pm.LoadFailed("could not load m.gguf: no"),
    pm.Events([Failed("no")]),
    pm.Scored("no"),
    pm.PerplexityProgress(1, 2, 0.5),
    pm.PerplexityDone({"ppl": 3.0}),
    pm.Tokenize("hi", True),
    pm.RenderPrompt(GenerateRequest(())),
    pm.AutotuneStatus(),
    pm.SteerResiduals(("a", "b"), "mean"),
    pm.SideFailure("no"),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_each_message_is_a_frozen_dataclass_that_crosses_the_pipe_whole(msg):
    assert dataclasses.is_dataclass(msg)
    assert type(msg).__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(msg)) == msg


class Steering:
    def __init__(self, problem: str | None) -> None:
        self.problem = problem

    def begin(self, steering) -> str | None:
        return self.problem


class Scorer:
    """Just what the worker's serve() asks of a model for a scoring."""

    def __init__(self, problem: str | None = None) -> None:
        self.steering = Steering(problem)
        self.autotune_status = None

    def score(self, tokens: list[int]) -> list[int]:
        return [t * 2 for t in tokens]


def _serve(model, *messages):
    parent, child = Pipe()
    served = threading.Thread(target=worker.serve, args=(model, child), daemon=True)
    served.start()
    answers = []
    for msg in messages:
        parent.send(msg)
        if isinstance(msg, pm.Score):
            answers.append(parent.recv())
    parent.send(pm.Close())
    served.join(10)
    assert not served.is_alive(), "Close ends the worker's serve loop"
    return answers


def test_the_worker_dispatches_on_the_type_and_stale_words_are_ignored():
    answers = _serve(Scorer(), pm.Cancel(), pm.NewSettings(SamplerSettings()), pm.Score([1, 2]))
    assert answers == [pm.Scored([2, 4])]


def test_a_scoring_that_cannot_begin_answers_as_a_scoring():
    """Its steering could not be cleared: the sentence comes back where the asker waits."""
    assert _serve(Scorer("the vector is gone"), pm.Score([1])) == [pm.Scored("the vector is gone")]


class Tokens:
    def tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        return [ord(c) for c in text]

    def pieces(self, ids: list[int]) -> list[int]:
        return ids


def test_the_side_pipe_answers_by_type_and_names_what_it_does_not_know():
    assert side_pipe.answer(Tokens(), [], pm.Tokenize("hi", False)) == [104, 105]  # type: ignore[arg-type]
    unknown = side_pipe.answer(Tokens(), [], ("shutdown",))  # type: ignore[arg-type]
    assert unknown == pm.SideFailure("the model worker got an unknown request ('shutdown')")
