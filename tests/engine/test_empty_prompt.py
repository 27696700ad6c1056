"""A prompt of no tokens (a raw prompt of no text, on a model that adds no BOS token) fails
with one sentence, and the engine goes on serving."""

from __future__ import annotations

from chatapp.engine.local.loop.reply_loop import EMPTY_PROMPT
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import Failed, Finished, GenerateRequest, LoadOptions
from chatapp.sampling import SamplerSettings

SHORT = SamplerSettings(temperature=0.0, max_tokens=4)


def test_an_empty_prompt_fails_plainly_and_the_engine_goes_on(model_path: str):
    options = LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0)
    with LocalEngine(options) as engine:
        assert engine.info is not None
        for request in (
            GenerateRequest(messages=(), settings=SHORT, raw_prompt=""),
            GenerateRequest(messages=(), settings=SHORT, prompt_ids=()),
            GenerateRequest(messages=(), settings=SHORT, raw_prompt="", n_alternatives=2),
        ):
            end = list(engine.generate(request))[-1]
            assert isinstance(end, Failed) and end.message == EMPTY_PROMPT, end
        end = list(engine.generate(GenerateRequest(messages=(), settings=SHORT, raw_prompt="Hi")))[
            -1
        ]
        assert isinstance(end, Finished) and end.stats.completion_tokens > 0
