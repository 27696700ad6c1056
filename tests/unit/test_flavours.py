"""The server flavour table: each server is told apart by its own probe, in the table's order,
and its row says what differs (names, top_k off, tokenizing, grammar)."""

from __future__ import annotations

import pytest

from chatapp.engine.remote import flavours
from chatapp.engine.remote.flavours import FLAVOURS, Tokenize, detect, flavour_of
from chatapp.engine.remote.stream import sampler_fields
from chatapp.sampling import SamplerSettings

PROPS = {"default_generation_settings": {"n_ctx": 4096}}


def _server(answers: dict[tuple[str, str], dict]):
    asked: list[str] = []

    def call(method: str, path: str, body: dict | None = None) -> dict | None:
        asked.append(path)
        return answers.get((method, path))

    return call, asked


@pytest.mark.parametrize(
    ("answers", "entries", "kind"),
    [
        ({("GET", "/props"): PROPS}, [{"id": "m"}], "llama-server"),
        ({}, [{"id": "m", "owned_by": "llamacpp"}], "llama-server"),
        ({("GET", "/api/version"): {"version": "0.5"}}, [{"id": "m"}], "ollama"),
        ({("POST", "/extras/tokenize"): {"tokens": [1]}}, [{"id": "m"}], "llama-cpp-python"),
        ({}, [{"id": "m", "owned_by": "vllm"}], "vllm"),
        ({}, [{"id": "m", "max_model_len": 8192}], "vllm"),
        ({("GET", "/api/version"): {"nope": 1}, ("GET", "/props"): {}}, [{"id": "m"}], "openai"),
    ],
)
def test_each_server_is_told_by_its_probe(answers, entries, kind):
    call, _ = _server(answers)
    flavour, props = detect(call, entries)
    assert flavour.kind == kind
    assert props == (PROPS if kind == "llama-server" and ("GET", "/props") in answers else {})


def test_probes_stop_at_the_first_flavour_that_answers():
    call, asked = _server({("GET", "/props"): PROPS})
    detect(call, [{"id": "m"}])
    assert asked == ["/props"]


def test_every_kind_is_one_row_and_an_unknown_name_is_the_generic_server():
    assert [f.kind for f in FLAVOURS][-1] == "openai"
    assert len({f.kind for f in FLAVOURS}) == len(FLAVOURS)
    assert flavour_of("something-else") is flavours.OPENAI
    assert flavour_of(flavours.VLLM) is flavours.VLLM


def test_the_rows_say_what_differs():
    s = SamplerSettings(top_k=0, repeat_penalty=1.2)
    assert sampler_fields(s, flavours.VLLM)["top_k"] == -1
    assert sampler_fields(s, flavours.LLAMA_SERVER)["top_k"] == 0
    assert "repetition_penalty" in sampler_fields(s, flavours.VLLM)
    assert flavours.LLAMA_SERVER.tokenize is Tokenize.PIECES
    assert flavours.LLAMA_CPP_PYTHON.tokenize is Tokenize.EXTRAS
    assert not flavours.OLLAMA.can_tokenize and not flavours.OPENAI.grammar
    assert flavours.grammar_servers() == "llama-server or the llama-cpp-python server"
