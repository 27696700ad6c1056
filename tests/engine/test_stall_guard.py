"""A decode step stopped mid-graph (stall_guard.py) is decoded again one thread short to the
very logits the step gives unstopped: the real model, greedy, token by token."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chatapp.engine.local.load import cpu_backend, thread_governor
from chatapp.engine.protocol import LoadOptions


@pytest.fixture(scope="module")
def loaded(model_path, engine):
    from chatapp.engine.local.load.loaded_model import LoadedModel

    # loaded as the `engine` fixture's start found works on this CPU; two threads (a governor)
    # whatever this machine has, flash attention off as an untuned CPU runs
    options, _ = cpu_backend.choose(
        LoadOptions(model_path, n_ctx=512, n_gpu_layers=0, n_threads=2, flash_attn=False)
    )
    return LoadedModel(replace(options, adapt_threads=True))  # (a count given is pinned)


def _greedy(w, prompt: list[int], n: int, every_step_stalls: bool):
    """n greedy tokens after `prompt` and the logits each was taken from; with
    `every_step_stalls`, each decode starts on two threads with a limit it cannot meet."""
    gov = w.governor
    w.reuse_prefix([-1])  # a fresh cache
    assert w.decode(prompt[:-1]) == 0 and w.decode_one(prompt[-1]) == 0
    tokens, rows = [], []
    for _ in range(n):
        row = w.logits(-1).copy()
        tokens.append(int(row.argmax()))
        rows.append(row)
        if every_step_stalls:
            gov._set_quietly(2)
            gov._pace[2] = 1e-9
        assert w.decode_one(tokens[-1]) == 0
    return tokens, rows


def test_a_stopped_step_gives_the_logits_of_the_step_unstopped(loaded, monkeypatch):
    w = loaded
    assert w.governor is not None and w.guard is not None and w.guard.active
    prompt = w.tokenize("List the planets of the solar system, in order:", add_bos=w.add_bos)
    w.governor._pace.clear()  # no pace: never stopped
    plain_tokens, plain_rows = _greedy(w, prompt, 24, every_step_stalls=False)
    assert w.guard.stopped == 0

    monkeypatch.setattr(thread_governor, "STALL_MIN_S", 0.0)
    tokens, rows = _greedy(w, prompt, 24, every_step_stalls=True)
    assert w.guard.stopped >= 1  # (how many depends on when the watcher got a core)
    stalls = [s for s in w.governor.switches if s.why == "stalled"]
    assert len(stalls) == w.guard.stopped and all(s.threads == 1 for s in stalls)
    assert tokens == plain_tokens
    for i, (row, plain) in enumerate(zip(rows, plain_rows, strict=True)):
        assert np.array_equal(row, plain), f"token {i}: the logits differ"
