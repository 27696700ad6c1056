"""The worker samples among the best few tokens only where that equals the full native chain."""

from __future__ import annotations

import os

import pytest

from chatapp.engine.local.load import cpu_backend
from chatapp.engine.local.loop import row_sampling, serving_model, token_loop
from chatapp.engine.protocol import ChatMessage, GenerateRequest, LoadOptions, Token
from chatapp.sampling import SamplerSettings

pytestmark = pytest.mark.slow  # a real model, loaded in this process


class Collect:
    """Stands in for the pipe to the parent: keeps the events, never has a message waiting."""

    def __init__(self) -> None:
        self.events: list = []
        self._quiet, self._unused = os.pipe()  # what the loop polls: never readable

    def send(self, message) -> None:
        self.events.extend(message.events)  # (an Events batch: pipe_messages.py)

    def fileno(self) -> int:
        return self._quiet

    def __del__(self) -> None:
        os.close(self._quiet)
        os.close(self._unused)


@pytest.fixture(scope="module")
def worker(model_path, engine):
    # Loaded as the engine loads it here: the `engine` fixture's start found out (and
    # remembered) whether llama.cpp's extra CPU buffers crash on this CPU; in this process a
    # crash would take pytest down with it.
    options, _ = cpu_backend.choose(LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0))
    return serving_model.ServingModel(options)


def _reply(worker, settings: SamplerSettings, ignore_eos: bool = False) -> list[int]:
    req = GenerateRequest(
        (ChatMessage("user", "Name twenty animals, then twenty colours."),),
        settings,
        top_n=10,
        ignore_eos=ignore_eos,
    )
    conn = Collect()
    token_loop.Generation(worker, conn, req).run()
    return [e.id for e in conn.events if isinstance(e, Token)]


@pytest.mark.parametrize(
    "settings",
    [
        SamplerSettings(temperature=1.3, top_k=100, top_p=1.0, min_p=0.0, repeat_penalty=1.6),
        SamplerSettings(temperature=0.9, top_k=64, top_p=0.95, min_p=0.0, repeat_penalty=1.3),
        SamplerSettings(temperature=0.0, repeat_penalty=1.8),
    ],
    ids=["k100-rp1.6", "k64-rp1.3", "greedy-rp1.8"],
)
def test_subset_sampling_equals_the_full_chain(worker, settings, monkeypatch):
    settings = settings.with_(seed=5, max_tokens=60)
    fast = _reply(worker, settings, ignore_eos=True)
    monkeypatch.setattr(row_sampling, "subset_exact", lambda s, m: False)  # the whole vocabulary
    full = _reply(worker, settings, ignore_eos=True)
    assert len(fast) == 60
    assert fast == full
