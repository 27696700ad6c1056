"""Each sampler is defined once (chatapp.sampling's table): every SamplerSettings field reaches
each part that reads the table, and the table's kept rules agree with llama.cpp's own chain."""

from __future__ import annotations

import ctypes
import dataclasses
import math

import llama_cpp
import numpy as np
import pytest
from fakes.engines import ScriptedEngine
from helpers import SIZE

from chatapp.cli.options import CLI_SAMPLERS, sampler_options
from chatapp.engine.candidate_rows import CUT_NAMES, Candidate, candidate_rows, chain_cuts
from chatapp.engine.remote.stream import sampler_fields
from chatapp.sampling import (
    BY_NAME,
    CUTS,
    SAMPLERS,
    SLIDERS,
    VOCAB,
    SamplerSettings,
    native_chain,
)

FIELDS = [f.name for f in dataclasses.fields(SamplerSettings)]
BASE = SamplerSettings(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, repeat_penalty=1.1)


BINDING = {
    "top_k": BASE.with_(top_p=1.0, min_p=0.0),
    "top_p": BASE.with_(top_k=0, min_p=0.0),
    "min_p": BASE.with_(top_k=0, top_p=1.0),
}


def _changed(name: str, base: SamplerSettings = BASE) -> SamplerSettings:
    """`base` with one field moved to another value within its bounds."""
    bound = BY_NAME[name].bound
    value = getattr(base, name)
    other = value + bound.step * 3 if value + bound.step * 3 <= bound.high else bound.low
    return base.with_(**{name: other})


def test_every_field_has_one_row():
    assert sorted(FIELDS) == sorted(BY_NAME) and len(SAMPLERS) == len(FIELDS)


@pytest.mark.parametrize("name", FIELDS)
def test_the_native_chain_reads_every_field_but_the_reply_length(name):
    """A field moves the native chain (its own step or another row's arguments), except
    max_tokens: the token loop's own limit."""
    moved = native_chain(_changed(name)) != native_chain(BASE)
    assert moved == (name != "max_tokens")


def test_every_native_step_is_a_llama_cpp_sampler():
    for s in (BASE, BASE.with_(temperature=0.0), BASE.with_(top_k=0, min_p=0.0, top_p=1.0)):
        for step in native_chain(s):
            assert callable(getattr(llama_cpp, step.init)), step


@pytest.mark.parametrize("name", FIELDS)
def test_the_kept_rule_reads_every_field_that_changes_what_is_drawn(name):
    """The rows' cuts and after-samplers probabilities move with every field that changes the
    distribution the chain draws from (the penalty through the logits; the window is the
    token loop's, the seed picks within the distribution, max_tokens ends the reply)."""
    rng = np.random.default_rng(3)
    raw = np.sort(rng.normal(0, 2.0, 200))[::-1].copy()
    ids = np.arange(200)
    recent = set(range(0, 30, 3))

    def rows(s: SamplerSettings) -> tuple[Candidate, ...]:
        return candidate_rows(ids, raw, 0.0, s, recent, 60, lambda i: b"")

    base = BINDING.get(name, BASE)  # (where the field's own step is the one that cuts)
    moved = rows(_changed(name, base)) != rows(base)
    assert moved == (name not in ("seed", "max_tokens", "repeat_last_n"))


def test_the_remote_request_sends_every_field_the_table_names():
    s = SamplerSettings(0.7, 12, 0.8, 0.03, 1.2, 99, 7, 33)
    body = sampler_fields(s, "llama-server")
    assert body == {row.server: getattr(s, row.name) for row in SAMPLERS if row.server}
    assert set(FIELDS) == {row.name for row in SAMPLERS if row.server}  # every field is sent
    assert "repeat_last_n" not in sampler_fields(s, "openai")  # llama-server's own key
    assert sampler_fields(s.with_(top_k=0), "vllm")["top_k"] == -1
    assert sampler_fields(s, "vllm")["repetition_penalty"] == 1.2


def test_the_sliders_and_the_cli_options_are_the_tables():
    assert [r.name for r in SLIDERS] == [
        "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "max_tokens", "seed",
    ]  # fmt: skip
    assert {r.name for r in CLI_SAMPLERS} == set(FIELDS) - {"repeat_last_n"}

    def command(prompt: str, samplers: dict | None = None, json: bool = False):
        return prompt, samplers, json

    wrapped = sampler_options(command)
    import inspect

    params = inspect.signature(wrapped).parameters
    assert list(params)[1 : 1 + len(CLI_SAMPLERS)] == [r.name for r in CLI_SAMPLERS]
    for row in CLI_SAMPLERS:
        help_text = params[row.name].annotation.__metadata__[0].help
        assert row.bound.help in help_text
    got = wrapped("hi", top_k=5, seed=9, json=True)
    assert got[0] == "hi" and got[2] is True
    assert got[1] == {**dict.fromkeys(r.name for r in CLI_SAMPLERS), "top_k": 5, "seed": 9}


async def test_the_slider_panel_and_the_cut_lines_read_the_table():
    """A slider per table row that has one, with the row's label and bounds; the Next token
    panel's cut line of every step that can cut, named by the row."""
    from chatapp.ui.app import ChatApp
    from chatapp.ui.widgets.sampler import Slider

    app = ChatApp(lambda: ScriptedEngine())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for row in SLIDERS:
            slider = app.query_one(f"#slider-{row.name}", Slider)
            assert slider.low == row.bound.low and slider.step == row.bound.step
            assert str(slider.render()).startswith(row.label)
        for s in (BASE, BASE.with_(temperature=0.0)):
            cands = [Candidate(1, b"a", 0.5, 1.0)]
            cands += [Candidate(i + 2, b"b", 0.1, 0.0, row.name) for i, row in enumerate(CUTS)]
            app.chat_screen.view.probs.settings = s
            app.chat_screen.view.probs.candidates = tuple(cands)
            text = str(app.chat_screen.view.probs.render())
            for row in CUTS:
                assert f"── {row.cut_text(s)} cut" in text
        assert BY_NAME["temperature"].cut_text(BASE) == "greedy"
        assert BY_NAME["top_k"].cut_text(BASE) == "top-k 40"


def _native_survivors(logits: np.ndarray, s: SamplerSettings, history: list[int]):
    """llama.cpp's chain (the table's steps without the final draw) applied to `logits`:
    the surviving ids and their probabilities after the temperature (or greedy's pick)."""
    lib = llama_cpp
    params = lib.llama_sampler_chain_default_params()
    chain = lib.llama_sampler_chain_init(params)
    for step in native_chain(s):
        if step.init == "llama_sampler_init_dist":
            continue
        args = (logits.shape[0] if a == VOCAB else a for a in step.args)
        lib.llama_sampler_chain_add(chain, getattr(lib, step.init)(*args))
    for tok in history:
        lib.llama_sampler_accept(chain, tok)
    n = logits.shape[0]
    data = (lib.llama_token_data * n)()
    for i, v in enumerate(logits.tolist()):
        data[i].id, data[i].logit, data[i].p = i, v, 0.0
    arr = lib.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    lib.llama_sampler_apply(chain, ctypes.byref(arr))
    lib.llama_sampler_free(chain)
    if s.greedy:
        return {data[arr.selected].id: 1.0}
    kept = [(data[i].id, data[i].logit) for i in range(arr.size)]
    top = max(v for _, v in kept)
    z = math.fsum(math.exp(v - top) for _, v in kept)
    return {t: math.exp(v - top) / z for t, v in kept}


@pytest.mark.parametrize("case", range(60))
def test_the_kept_rule_agrees_with_llama_cpps_chain(case):
    """Random logits, history and settings: the tokens llama.cpp's chain keeps and their
    probabilities equal chain_cuts' (the rows' after-samplers column)."""
    rng = np.random.default_rng(case)
    n = int(rng.choice([50, 500, 5000]))
    logits = (rng.normal(0, rng.choice([0.5, 2.0, 5.0]), n)).astype(np.float32)
    history = rng.integers(0, n, int(rng.integers(1, 40))).tolist()
    s = SamplerSettings(
        temperature=float(rng.choice([0.0, 0.3, 0.8, 1.3, 2.0])),
        top_k=int(rng.choice([0, 1, 5, 40, 200])),
        top_p=float(rng.choice([0.0, 0.3, 0.5, 0.9, 0.95, 1.0])),
        min_p=float(rng.choice([0.0, 0.02, 0.1, 0.5])),
        repeat_penalty=float(rng.choice([1.0, 1.1, 1.5])),
        repeat_last_n=int(rng.choice([0, 8, 64])),
    )
    want = _native_survivors(logits, s, history)
    window = set(history[-s.repeat_last_n :]) if s.repeat_last_n else set()
    pen = logits.astype(np.float64)
    if s.repeat_penalty != 1.0 and window:
        for t in window:
            pen[t] = pen[t] / s.repeat_penalty if pen[t] > 0 else pen[t] * s.repeat_penalty
    order = np.argsort(-pen, kind="stable")
    cut, final, _ = chain_cuts(pen[order], s)
    got = {int(order[i]): float(final[i]) for i in np.flatnonzero(cut == 0)}
    assert got.keys() == want.keys(), (s, sorted(got), sorted(want))
    for t, p in want.items():
        assert got[t] == pytest.approx(p, rel=1e-4, abs=1e-7)
    assert set(CUT_NAMES[c] for c in cut.tolist()) <= {"", *(r.name for r in CUTS)}


def test_the_repeat_penalty_lowers_a_logit_either_side_of_zero_as_llama_cpp_does():
    from chatapp.sampling import repeat_penalized

    logits = np.array([2.2, -2.0, 0.0, -np.inf], dtype=np.float32)
    out = repeat_penalized(logits, 1.1)
    assert out.dtype == np.float32
    assert out.tolist() == np.array([2.2 / 1.1, -2.0 * 1.1, 0.0, -np.inf], np.float32).tolist()


def test_a_benchs_server_body_and_python_call_get_the_tables_fields():
    from chatapp.sampling import PRESETS, by_name, server_fields

    s = PRESETS["balanced"]
    body = server_fields(s, "llama-server", leave_out=("max_tokens",))
    assert body == {r.server: getattr(s, r.name) for r in SAMPLERS if r.server != "max_tokens"}
    assert "repeat_last_n" not in server_fields(s, "vllm")
    assert by_name(s, leave_out=("seed",)) == {k: v for k, v in s.to_dict().items() if k != "seed"}
