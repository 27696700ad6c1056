"""Why a reply was slow: its time in parts and a verdict naming the biggest (pure)."""

from __future__ import annotations

from chatapp import breakdown
from chatapp.metrics import GenerationStats


def _stats(**kw) -> GenerationStats:
    base = dict(
        prompt_tokens=3200,
        prompt_evaluated=3120,
        completion_tokens=41,
        ttft_s=15.4,
        prefill_s=15.2,
        decode_s=0.5,
        template_s=0.01,
        tokenize_s=0.02,
    )
    return GenerationStats(**{**base, **kw})


def test_a_long_new_prompt_is_named_with_its_rate_and_what_was_reused():
    st = _stats()
    verdict = breakdown.verdict(st)
    assert verdict.startswith("prefill: 3,120 new prompt tokens at 205 t/s; 80 reused")
    names = [p.name for p in breakdown.parts(st, load_s=1.0, ui_s=0.03)]
    assert names == ["load", "template", "tokenize", "prefill", "first token", "decode", "ui"]
    first = next(p for p in breakdown.parts(st) if p.name == "first token")
    assert abs(first.seconds - (15.4 - 0.01 - 0.02 - 15.2)) < 1e-9


def test_nothing_reused_and_a_slow_decode_with_drafts():
    st = _stats(
        prompt_tokens=20,
        prompt_evaluated=20,
        prefill_s=0.1,
        ttft_s=0.15,
        completion_tokens=301,
        decode_s=4.0,
        draft="ngram",
        draft_tokens=230,
        draft_accepted=212,
        draft_batches=30,
    )
    parts = {p.name: p for p in breakdown.parts(st)}
    assert "nothing reused" in parts["prefill"].detail
    assert breakdown.verdict(st).startswith(
        "decode: 300 more tokens at 75.0 t/s; 212/230 draft tokens accepted"
    )
    data = breakdown.as_dict(st, load_s=None)
    assert data["verdict"] == breakdown.verdict(st) and data["parts"][0]["name"] == "template"
    assert st.acceptance == 212 / 230 and st.mean_accepted == 212 / 30


def test_a_wait_behind_the_tune_is_its_own_part_and_not_the_uis():
    st = _stats(prompt_evaluated=30, prefill_s=0.1, ttft_s=0.15, completion_tokens=2,
                decode_s=0.01, tune_wait_s=0.4)  # fmt: skip
    ui_s = breakdown.ui_share(st, first_paint_s=0.6)  # submit to first paint
    assert abs(ui_s - (0.6 - 0.15 - 0.4)) < 1e-9
    parts = breakdown.parts(st, ui_s=ui_s)
    assert [p.name for p in parts][:2] == ["tune wait", "template"]
    assert breakdown.verdict(st, ui_s=ui_s).startswith(
        "tune wait: the tune on first use stopping the step it was in (0.40 s"
    )
    assert "tune wait" not in [p.name for p in breakdown.parts(_stats())]  # no tune: no part
    assert breakdown.ui_share(_stats(), None) is None
