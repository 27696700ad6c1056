"""Steering through the engine on the real models: a vector made from a built-in pair, replies
steered from the prompt on or from a token in the middle, the KV cache never mixing steerings,
the concept meter, gemma3-270m, and the commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import one_error_line, run_cli

from chatapp.engine import control_vector, steer_library
from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import (
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    SteeringApplied,
    Token,
)
from chatapp.engine.steering import Steering, SteerVector
from chatapp.sampling import SamplerSettings

PROMPT = "Today I went to the park and"
GREEDY = SamplerSettings(temperature=0.0, repeat_penalty=1.0, max_tokens=24)


@pytest.fixture(scope="module")
def happy(engine, tmp_path_factory) -> str:
    """The built-in happy pair made into a vector on the bundled model."""
    path = tmp_path_factory.mktemp("steer") / "happy.gguf"
    control_vector.write(
        path, steer_library.make_vector(engine, steer_library.builtin_pair("happy"))
    )
    return str(path)


def _steer(path: str, strength: float) -> Steering:
    return Steering((SteerVector("happy", path, strength),))


def _reply(engine, steering=None, settings=GREEDY, prompt=PROMPT) -> list[Token]:
    request = GenerateRequest((), settings, raw_prompt=prompt, steering=steering, top_n=1)
    events = list(engine.generate(request))
    assert isinstance(events[-1], Finished), events[-1]
    return [e for e in events if isinstance(e, Token)]


def _ids(tokens: list[Token]) -> list[int]:
    return [t.id for t in tokens]


def test_replies_decoded_together_bend_from_the_same_token(engine, happy):
    """Regenerate x N: a slider moved mid-reply steers every reply of the batch, from the next
    token on (the replies run in step, so one index marks them all)."""
    settings = SamplerSettings(temperature=0.0, repeat_penalty=1.0, max_tokens=80)

    def together(steer_at: int | None) -> tuple[list, list[SteeringApplied]]:
        request = GenerateRequest(
            (), settings, raw_prompt=PROMPT, top_n=1, ignore_eos=True, n_alternatives=2
        )
        events = []
        for event in engine.generate(request):
            events.append(event)
            if isinstance(event, Token) and event.index == steer_at and event.seq == 0:
                engine.set_steering(_steer(happy, 8.0))
        applied = [e for e in events if isinstance(e, SteeringApplied)]
        return [e for e in events if isinstance(e, Token)], applied

    plain, none = together(None)
    steered, applied = together(0)
    assert none == [] and len(applied) == 1
    first = applied[0].index
    assert 0 < first < 30
    for seq in (0, 1):
        ours = [t.id for t in steered if t.seq == seq]
        theirs = [t.id for t in plain if t.seq == seq]
        assert ours[:first] == theirs[:first]
        assert ours[first : first + 20] != theirs[first : first + 20]


def test_a_steered_reply_is_the_same_whatever_the_cache_held(engine, happy, model_path):
    # (in the shared engine's mode: an earlier reply with drafts may have turned exact batches
    # on, and flash attention over a Q8_0 K cache rounds otherwise)
    exact = engine.info.exact_batches
    fresh = LocalEngine(
        LoadOptions(model_path=model_path, n_ctx=2048, n_gpu_layers=0, exact_batches=exact)
    )
    fresh.start()
    assert fresh.info.exact_batches == exact
    try:  # a steered reply on a fresh context: the prompt read with the vector from BOS on
        steered = _ids(_reply(fresh, _steer(happy, 4.0)))
    finally:
        fresh.close()
    plain = _ids(_reply(engine))
    assert _ids(_reply(engine, _steer(happy, 4.0))) == steered  # the plain cache is not reused
    assert _ids(_reply(engine)) == plain  # nor the steered one by a plain reply
    assert _ids(_reply(engine, _steer(happy, 0.0))) == plain  # strength 0 is steering off
    assert steered != plain


def test_moving_the_slider_mid_reply_changes_the_reply_from_the_next_token(engine, happy):
    settings = GREEDY.with_(max_tokens=160)
    plain = _reply(engine, settings=settings)
    request = GenerateRequest((), settings, raw_prompt=PROMPT, top_n=1, ignore_eos=True)
    events = []
    for event in engine.generate(request):
        events.append(event)
        if isinstance(event, Token) and event.index == 0:
            engine.set_steering(_steer(happy, 8.0))
    applied = [e for e in events if isinstance(e, SteeringApplied)]
    assert len(applied) == 1 and applied[0].steering == _steer(happy, 8.0)
    first = applied[0].index
    tokens = [e for e in events if isinstance(e, Token)]
    assert 0 < first < 40
    assert _ids(tokens[:first]) == _ids(plain[:first])
    for ours, theirs in zip(tokens[:first], plain[:first], strict=True):
        assert ours.logprob == pytest.approx(theirs.logprob, abs=1e-5)
    # the token `first` is the first computed with the vector: its distribution has moved
    changed = tokens[first]
    before = plain[first]
    assert changed.id != before.id or abs(changed.logprob - before.logprob) > 1e-3
    assert _ids(tokens[first : first + 20]) != _ids(plain[first : first + 20])
    # Going on from that reply without steering: the cells computed with the vector are not
    # reused (the same as when the cache held something else).
    go_on = GenerateRequest(
        (), GREEDY, raw_prompt=PROMPT, reply_prefix_ids=tuple(_ids(tokens[: first + 12]))
    )
    after = [e.id for e in engine.generate(go_on) if isinstance(e, Token)]
    _reply(engine, prompt="Something else entirely.")
    assert [e.id for e in engine.generate(go_on) if isinstance(e, Token)] == after


def test_the_meter_puts_a_happy_text_above_a_sad_one(engine, happy):
    vector = control_vector.read(happy)
    glad = engine.meter("What a wonderful surprise, I am delighted!", vector)
    grim = engine.meter("What a terrible loss, I am heartbroken.", vector)
    assert glad.projections.shape == (len(glad.tokens), engine.info.n_layers - 1)
    middle = range(8, 22)
    assert glad.mean(middle) > grim.mean(middle)


def test_a_file_gone_or_of_another_width_fails_the_reply_in_one_sentence(engine, tmp_path):
    gone = Steering((SteerVector("gone", str(tmp_path / "gone.gguf"), 1.0),))
    events = list(engine.generate(GenerateRequest((), GREEDY, raw_prompt=PROMPT, steering=gone)))
    assert events == [Failed(f"the control vector file {tmp_path / 'gone.gguf'} is gone")]
    wide = tmp_path / "wide.gguf"
    control_vector.write(wide, control_vector.ControlVector({1: np.ones(640, np.float32)}))
    steering = Steering((SteerVector("wide", str(wide), 1.0),))
    events = list(
        engine.generate(GenerateRequest((), GREEDY, raw_prompt=PROMPT, steering=steering))
    )
    assert events == [
        Failed(
            f"the vector 'wide' ({wide}) is 640 wide but SmolLM2-135M-Instruct.Q4_1.gguf is 576 "
            "wide: make one for this model with `chatapp steer make wide`"
        )
    ]
    assert _reply(engine)  # and the engine goes on


def test_gemma_makes_applies_and_meters_its_own_vector_and_refuses_smollms(gemma, happy, tmp_path):
    engine, info = gemma
    path = tmp_path / "gemma-happy.gguf"
    vector = steer_library.make_vector(engine, steer_library.builtin_pair("happy"))
    control_vector.write(path, vector)
    assert vector.n_embd == info.n_embd == 640 and vector.last_layer == info.n_layers - 1
    assert vector.model_hint == "gemma3"
    plain = _ids(_reply(engine))
    assert _ids(_reply(engine, _steer(str(path), 30.0))) != plain
    assert _ids(_reply(engine)) == plain
    glad = engine.meter("What a wonderful surprise, I am delighted!", vector)
    grim = engine.meter("What a terrible loss, I am heartbroken.", vector)
    assert glad.mean() > grim.mean()
    events = list(
        engine.generate(GenerateRequest((), GREEDY, raw_prompt=PROMPT, steering=_steer(happy, 1.0)))
    )
    assert events == [
        Failed(
            f"the vector 'happy' ({happy}) is 576 wide (made on llama) but "
            "gemma-3-270m-q4_k_m.gguf is 640 wide: make one for this model with "
            "`chatapp steer make happy`"
        )
    ]


def test_the_commands_make_list_meter_and_steer_a_raw_reply():
    r = run_cli("steer", "make", "happy", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["layers"] == 29 and made["n_embd"] == 576 and made["positive"] == 8
    r = run_cli("steer", "make", "happy")
    assert "give --replace to make it again" in one_error_line(r)
    listed = json.loads(run_cli("steer", "list", "--json").stdout)
    assert [v["name"] for v in listed["vectors"]] == ["happy"]
    assert listed["builtin_not_made"] == ["formal", "french"]
    r = run_cli("steer", "meter", "happy", "I am so glad!", "--json")
    meter = json.loads(r.stdout)
    assert [t["text"] for t in meter["tokens"]] == ["I", " am", " so", " glad", "!"]
    assert len(meter["tokens"][0]["projection"]) == len(meter["layers"]) == 29
    args = ["ask", "--raw", PROMPT, "--temperature", "0", "--max-tokens", "8", "--json"]
    r = run_cli(*args, "--steer", "happy:4", "--steer-layers", "2-25")
    reply = json.loads(r.stdout)
    assert reply["raw"] is True
    assert reply["prompt_tokens"] == 7  # the prompt as is: no chat template around it
    assert reply["steering"] == {
        "vectors": [{"name": "happy", "path": made["path"], "strength": 4.0}],
        "layers": [2, 25],
    }
    plain = json.loads(run_cli(*args).stdout)
    assert plain["steering"] is None and plain["text"] != reply["text"]
