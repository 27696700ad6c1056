"""A long prompt reports how far its prefill got, batch by batch (a silent wait reads as a
crash), and the reply's time breakdown names the prefill."""

from __future__ import annotations

import pytest

from chatapp import breakdown
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
    PrefillProgress,
    PromptEvaluated,
)
from chatapp.sampling import SamplerSettings


@pytest.mark.slow
def test_a_prompt_longer_than_a_batch_reports_its_progress(model_path):
    options = LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0, n_batch=64)
    text = " ".join(f"item {i} is a small red box." for i in range(60))
    req = GenerateRequest(
        (ChatMessage("user", text),), SamplerSettings(temperature=0.0, max_tokens=3)
    )
    with LocalEngine(options) as engine:
        events = list(engine.generate(req))
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    evaluated = next(e for e in events if isinstance(e, PromptEvaluated))
    assert len(progress) >= 5
    assert [p.done for p in progress] == sorted(p.done for p in progress)
    assert all(p.total == evaluated.n_new for p in progress)
    assert progress[-1].done == evaluated.n_new - 1  # the last token is evaluated on its own
    assert events.index(progress[-1]) < events.index(evaluated)
    st = events[-1].stats
    assert isinstance(events[-1], Finished) and st.template_s > 0 and st.tokenize_s > 0
    assert "new prompt tokens" in breakdown.verdict(st) or "decode" in breakdown.verdict(st)
