"""The worker's side pipe (tokenize, template, capture, tune status): a request that fails
there comes back as an error, the pipe goes on serving, and the caller never waits forever."""

from __future__ import annotations

import threading

import pytest

from chatapp.engine.local.pipe_messages import Tokenize
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import EngineError, LoadOptions


def answer_within(call, seconds: float = 30.0):
    """What call() returned or raised; fails if it had no answer in time (a dead side thread
    left the caller polling forever)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"no answer in {seconds:g} s: the side pipe stopped answering"
    return outcome[0]


@pytest.fixture
def engine(model_path):
    """A worker of its own: the failure tested here would break a shared one."""
    with LocalEngine(LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)) as engine:
        yield engine


def test_a_request_that_raises_in_the_worker_is_an_error_and_the_pipe_lives_on(engine):
    failed = answer_within(lambda: engine._side_call(Tokenize(None, True)))  # a text it cannot take
    assert isinstance(failed, EngineError)
    assert str(failed) == (
        "tokenize failed in the model worker: AttributeError: "
        "'NoneType' object has no attribute 'encode'"
    )
    unknown = answer_within(lambda: engine._side_call(("shutdown",)))
    assert isinstance(unknown, EngineError)
    assert str(unknown) == "the model worker got an unknown request ('shutdown')"
    pieces = answer_within(lambda: engine.tokenize("Hello there", special=False))
    assert b"".join(p.piece for p in pieces) == b"Hello there"
    assert engine.alive
