"""The worker process dies or the file is bad: clear errors, and a new worker works."""

from __future__ import annotations

import os
import signal

import pytest

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    ChatMessage,
    EngineCrashed,
    Finished,
    GenerateRequest,
    LoadOptions,
    Token,
)
from chatapp.errors import ModelFileError
from chatapp.sampling import SamplerSettings


def request(n: int = 200) -> GenerateRequest:
    return GenerateRequest(
        (ChatMessage("user", "Tell me about the sea."),),
        SamplerSettings(temperature=0.0, max_tokens=n),
        ignore_eos=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_worker_killed_mid_reply_raises_crashed_and_restarts(model_path, sig):
    eng = LocalEngine(LoadOptions(model_path=model_path, n_ctx=512, n_gpu_layers=0))
    eng.start()
    seen = 0
    try:
        with pytest.raises(EngineCrashed) as info:
            for event in eng.generate(request()):
                if isinstance(event, Token):
                    seen += 1
                    if seen == 3:
                        os.kill(eng.pid, sig)
        assert "died" in str(info.value)
        assert sig.name in str(info.value)
        assert "start it again" in str(info.value)
        assert info.value.log_tail, "the last log lines come with the error"
        assert seen >= 3
        eng.start()  # a new worker
        events = list(eng.generate(request(4)))
        assert isinstance(events[-1], Finished)
        assert sum(isinstance(e, Token) for e in events) == 4
    finally:
        eng.close()


def test_non_gguf_file_is_refused_clearly(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is not a model")
    with pytest.raises(ModelFileError) as info:
        LocalEngine(LoadOptions(model_path=str(bad))).start()
    assert (
        str(info.value) == f"{bad} is not a GGUF model file (it does not start with the GGUF magic)"
    )


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ModelFileError, match="model file not found"):
        LocalEngine(LoadOptions(model_path=str(tmp_path / "nope.gguf"))).start()
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty"):
        LocalEngine(LoadOptions(model_path=str(empty))).start()
