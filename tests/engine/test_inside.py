"""Inside the model: the logit lens, attention and neighbours from the inspector context, on the
bundled model and gemma3-270m; a failing graph callback corrupts nothing; a server cannot."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from fakes.engines import ScriptedEngine
from helpers import pane

from chatapp.commands.inside import LAST_LAYER_NOTE, as_dict, as_text, surprise_rows
from chatapp.engine.factory import make_engine
from chatapp.engine.inspection import InsideUnavailable, Inspection, InspectRequest
from chatapp.engine.local.inside.graph_reader import FAULT_ENV
from chatapp.engine.local.inside.inspector import ubatch_for
from chatapp.engine.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadOptions,
    Token,
    TokenPiece,
)
from chatapp.engine.remote.client import RemoteEngine
from chatapp.sampling import SamplerSettings

GREEDY = SamplerSettings(temperature=0.0, repeat_penalty=1.0, max_tokens=6)
PROMPTS = [
    GenerateRequest(messages=(ChatMessage("user", "What is the capital of France?"),)),
    GenerateRequest(messages=(), raw_prompt="The capital of France is"),
    GenerateRequest(messages=(), raw_prompt="def fibonacci(n):\n    if n < 2:\n        return"),
]

# ---- without a model ----------------------------------------------------------------------


def test_a_server_says_it_cannot_look_inside():
    with pytest.raises(InsideUnavailable, match="no view of the model's layers"):
        RemoteEngine("http://127.0.0.1:9").inspect(InspectRequest(tokens=(1, 2)))


def test_the_json_has_the_issues_keys():
    found = ScriptedEngine().inspect(InspectRequest(tokens=(1, 2, 3, 4)))
    data = json.loads(json.dumps(as_dict(found, heads=True)))
    assert {"layers", "attention", "neighbours", "lens_ok", "chosen"} <= set(data)
    assert [row["layer"] for row in data["layers"]] == list(range(6))
    assert set(data["layers"][0]) >= {"layer", "top", "chosen_rank", "chosen_p"}
    assert set(data["layers"][0]["top"][0]) == {"id", "piece", "p"}
    assert set(data["attention"][0]) == {"layer", "weights", "heads"}
    assert len(data["attention"][0]["weights"]) == 4  # one per prompt position
    assert set(data["neighbours"][0]) == {"id", "piece", "cosine"}


def test_the_text_views_heads_are_one_layers_never_a_mean_over_layers():
    found = ScriptedEngine().inspect(InspectRequest(tokens=(1, 2, 3, 4)))
    att = np.zeros_like(found.attention)
    att[:, :, 0] = 1.0  # every layer's heads read position 0 ...
    att[-1, 0, :] = 0.0
    att[-1, 0, 3] = 1.0  # ... but head 0 of the last layer reads position 3 alone
    found = replace(found, attention=att)
    n = found.n_layers
    text = as_text(found, heads=True)
    assert f"by head, layer {n} (--layer picks another)" in text
    head0 = next(line for line in text.splitlines() if line.strip().startswith("head  0"))
    first_cell = head0.split(")", 1)[1].strip()
    # the last layer's head 0 gives position 3 all its weight; a mean over the layers would
    # have put position 0 first with (n-1)/n of it
    assert first_cell.startswith(repr(found.pieces[3].decode())) and " 1.00" in first_cell
    layer_1 = as_text(found, heads=True, layer=1)
    assert "by head, layer 1 (" in layer_1 and "picks another" not in layer_1


def test_the_lens_table_says_how_many_it_lists_and_explains_the_last_layer():
    found = ScriptedEngine().inspect(InspectRequest(tokens=(1, 2, 3, 4)))
    text = as_text(found)
    assert f"top {len(found.layers[1].top)} (p)" in text and LAST_LAYER_NOTE in text


def test_surprise_rows_give_p_and_rank():
    logprobs = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], dtype=np.float32))
    pieces = [TokenPiece(0, b"a"), TokenPiece(1, b"b"), TokenPiece(2, b"c")]
    rows = surprise_rows(pieces, logprobs)
    assert rows[0]["p"] is None
    assert rows[1]["rank"] == 2 and rows[1]["p"] == pytest.approx(0.2)
    assert rows[2]["rank"] == 1 and rows[2]["p"] == pytest.approx(0.6)


def test_the_inspector_ubatch_keeps_the_score_matrix_small():
    assert ubatch_for(2048, 9) == 512
    assert 8 <= ubatch_for(131072, 64) < 64


# ---- the real models --------------------------------------------------------------------


def _greedy_first(engine, request: GenerateRequest) -> int:
    events = list(engine.generate(replace(request, settings=GREEDY)))
    assert isinstance(events[-1], Finished)
    return next(e for e in events if isinstance(e, Token)).id


def _check_attention(found: Inspection) -> None:
    att = found.attention
    assert att.shape == (found.n_layers, found.n_head, found.position + 1)
    assert not np.isnan(att).any(), found.notes
    assert (att >= 0).all()
    np.testing.assert_allclose(att.sum(axis=2), 1.0, atol=1e-3)


def _check_lens(engine, request: GenerateRequest) -> Inspection:
    found = engine.inspect(InspectRequest(prompt=request))
    assert found.lens_ok, found.lens_note
    greedy = _greedy_first(engine, request)
    assert found.chosen.id == greedy
    assert found.layers[-2].top[0].id == greedy  # the last layer through the lens
    assert found.layers[-1].chosen_rank == 1 and found.layers[0].name == "embedding"
    assert len(found.layers) == found.n_layers + 2
    _check_attention(found)
    assert len(found.neighbours) == 10 and found.chosen.id not in [n.id for n in found.neighbours]
    assert all(-1.0 <= n.cosine <= 1.0 for n in found.neighbours)
    return found


@pytest.fixture(scope="module")
def smol(model_path):
    engine = make_engine(LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0))
    engine.start()
    yield engine
    engine.close()


@pytest.mark.slow
@pytest.mark.parametrize("request_", PROMPTS, ids=["chat", "raw", "code"])
def test_the_last_layers_lens_gives_the_greedy_token(smol, request_):
    _check_lens(smol, request_)


@pytest.mark.slow
def test_an_earlier_token_after_a_later_one_is_the_same_as_afresh(smol):
    ids = [t.id for t in smol.tokenize("The cat sat on the mat and looked at the dog.")]
    later = smol.inspect(InspectRequest(tokens=tuple(ids), position=-1))
    earlier = smol.inspect(InspectRequest(tokens=tuple(ids), position=4))
    assert earlier.position == 4 and earlier.timings["prefilled"] == 1  # its cache was reused
    _check_attention(earlier)
    _check_attention(later)
    afresh = smol.inspect(InspectRequest(tokens=tuple(ids[:5]) + (0,), position=4))
    np.testing.assert_allclose(earlier.attention, afresh.attention, atol=1e-4)
    assert earlier.chosen == afresh.chosen
    chosen = smol.inspect(InspectRequest(tokens=tuple(ids), position=4, chosen=ids[5]))
    assert chosen.chosen.id == ids[5] and chosen.layers[-1].chosen_rank >= 1


@pytest.mark.slow
def test_a_position_past_the_tokens_is_a_sentence(smol):
    from chatapp.engine.protocol import EngineError

    with pytest.raises(EngineError, match="no token at position 9"):
        smol.inspect(InspectRequest(tokens=(1, 2, 3), position=9))


@pytest.mark.slow
def test_a_callback_that_raises_corrupts_nothing(model_path, smol, monkeypatch):
    request = PROMPTS[1]
    clean = smol.inspect(InspectRequest(prompt=request))
    clean_reply = list(smol.generate(replace(request, settings=GREEDY)))
    monkeypatch.setenv(FAULT_ENV, "raise")  # the worker's first capture raises once
    engine = make_engine(LoadOptions(model_path=model_path, n_ctx=1024, n_gpu_layers=0))
    engine.start()
    try:
        faulty = engine.inspect(InspectRequest(prompt=request))
        assert any("fault injected" in n for n in faulty.notes)
        # the graph ran to its end: the model's own output is the clean one
        assert faulty.chosen == clean.chosen
        np.testing.assert_allclose(faulty.layers[-1].chosen_p, clean.layers[-1].chosen_p, 1e-5)
        # and the KV cache it wrote is right: the next capture reuses it and matches
        ids = tuple(clean.tokens) + (clean.chosen.id,)
        nxt = engine.inspect(InspectRequest(tokens=ids, position=-1))
        ref = smol.inspect(InspectRequest(tokens=ids, position=-1))
        assert nxt.timings["prefilled"] == 1 and nxt.chosen == ref.chosen
        np.testing.assert_allclose(nxt.attention, ref.attention, atol=1e-4)
        reply = list(engine.generate(replace(request, settings=GREEDY)))
        assert reply[-1].text == clean_reply[-1].text
    finally:
        engine.close()


@pytest.mark.slow
def test_chatapp_inside_json(model_path, capsys):
    from chatapp.cli import main

    with pytest.raises(SystemExit) as done:
        main(["inside", "The capital of France is", "--raw", "--json", "-m", model_path])
    assert done.value.code == 0
    data = json.loads(capsys.readouterr().out)
    n = len(data["attention"])
    assert [row["layer"] for row in data["layers"]] == list(range(n + 2))
    assert data["layers"][0]["name"] == "embedding" and data["layers"][-1]["name"] == "final"
    assert data["layers"][-1]["top"][0]["piece"] == " Paris"
    assert all(len(a["weights"]) == len(data["tokens"]) for a in data["attention"])
    assert len(data["neighbours"]) == 10 and data["lens_ok"] is True
    assert all(len(row["top"]) == 3 for row in data["layers"])


@pytest.mark.slow
def test_chatapp_inside_top_lists_n_tokens_per_depth(model_path, capsys):
    from chatapp.cli import main

    with pytest.raises(SystemExit) as done:
        main(["inside", "The capital of France is", "--raw", "--top", "7", "-m", model_path])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "top 7 (p)" in out
    final = next(line for line in out.splitlines() if line.startswith("final"))
    assert final.count("'") >= 14  # seven quoted tokens


@pytest.mark.slow
def test_chatapp_inside_text_scores_a_file(model_path, tmp_path, capsys):
    from chatapp.cli import main

    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat. The dog sat on the log.")
    with pytest.raises(SystemExit) as done:
        main(["inside", "--text", str(text), "--json", "-m", model_path])
    assert done.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["perplexity"] > 1 and data["scored_tokens"] == len(data["tokens"]) - 1
    assert "".join(t["piece"] for t in data["tokens"]) == text.read_text()


# ---- gemma3-270m: another architecture, a 262k vocabulary (float16 lens matrix) ------------


@pytest.mark.slow
@pytest.mark.parametrize("request_", PROMPTS[1:], ids=["raw", "code"])
def test_gemma_last_layers_lens_gives_the_greedy_token(gemma, request_):
    _check_lens(gemma[0], request_)


# ---- the Inside tab ------------------------------------------------------------------------


async def test_the_inside_tab_captures_the_selected_token_in_a_worker():
    from helpers import SIZE, send, wait_until
    from textual.widgets import TabbedContent

    from chatapp.ui.app import ChatApp
    from chatapp.ui.widgets.inside import InsidePanel

    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        panel = app.query_one(InsidePanel)
        app.query_one(TabbedContent).active = "tab-inside"
        try:
            await wait_until(pilot, lambda: panel.inspection is not None, 5)
        except AssertionError:
            raise AssertionError(panel.status) from None
        n_prompt, n_reply = (
            len(app.chat_screen.view.token_panel.prompt),
            len(app.chat_screen.view.token_panel.reply_tokens),
        )
        last = engine.inspections[-1]
        assert last.position == n_prompt + n_reply - 2  # the pass that wrote the latest token
        assert last.chosen == app.chat_screen.view.token_panel.reply_tokens[-1].id
        text = panel.render_inspection(panel.inspection).plain
        assert "final" in text and "Attention" in text and "Nearest" in text
        assert "attention sink" in text
        panel.focus()
        await pilot.press("]")
        assert panel.attention_layer == 1
        assert panel.layer == "default"  # Textual's own layer, where it is drawn
        app.query_one(TabbedContent).active = "tab-tokens"
        app.chat_screen.view.token_panel.strip.cursor = 2
        app.query_one(TabbedContent).active = "tab-inside"
        await wait_until(pilot, lambda: engine.inspections[-1].position == n_prompt + 1)
        assert engine.inspections[-1].chosen == app.chat_screen.view.token_panel.reply_tokens[2].id


@pytest.mark.slow
async def test_the_inside_tab_on_the_real_model_explains_the_latest_token(model_path):
    from helpers import SIZE, send, wait_until
    from textual.widgets import TabbedContent

    from chatapp.engine.local.process.local_engine import LocalEngine
    from chatapp.ui.app import ChatApp
    from chatapp.ui.widgets.inside import InsidePanel

    app = ChatApp(lambda: LocalEngine(LoadOptions(model_path, n_ctx=1024, n_gpu_layers=0)))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, app, "Name a colour.")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None, 60
        )
        panel = app.query_one(InsidePanel)
        app.query_one(TabbedContent).active = "tab-inside"
        await wait_until(pilot, lambda: panel.inspection is not None, 60)
        found = panel.inspection
        assert found.chosen.id == app.chat_screen.view.token_panel.reply_tokens[-1].id
        assert found.lens_ok and found.layers[-1].chosen_rank >= 1
        _check_attention(found)


class _GroupedEngine(ScriptedEngine):
    """The scripted capture with 6 query heads reading 2 KV heads; head 5 looks only at the
    captured token itself."""

    def inspect(self, request: InspectRequest) -> Inspection:
        found = super().inspect(request)
        att = np.repeat(found.attention[:, :1], 6, axis=1)
        att[:, 5] = 0.0
        att[:, 5, -1] = 1.0
        return replace(found, attention=att, n_head_kv=2)


async def test_h_steps_the_attention_through_each_head_and_back_to_the_mean():
    from helpers import SIZE, send, wait_until
    from textual.widgets import TabbedContent

    from chatapp.ui.app import ChatApp
    from chatapp.ui.keys import help_rows
    from chatapp.ui.widgets.inside import InsidePanel

    engine = _GroupedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        assert any(bid == "inside.head" for _, _, bid in help_rows(app))  # F1 lists it
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        panel = app.query_one(InsidePanel)
        app.query_one(TabbedContent).active = "tab-inside"
        await wait_until(pilot, lambda: panel.inspection is not None, 5)
        panel.focus()
        assert panel.head == -1
        assert "mean over 6 heads" in panel.render_inspection(panel.inspection).plain
        await pilot.press("h")
        assert panel.head == 0
        assert "head 0 (KV group 0 of 2)" in panel.render_inspection(panel.inspection).plain
        for _ in range(5):
            await pilot.press("h")
        text = panel.render_inspection(panel.inspection).plain
        assert panel.head == 5 and "head 5 (KV group 1 of 2)" in text
        assert "attention sink" not in text  # head 5 reads only the token itself
        n = panel.inspection.position
        np.testing.assert_allclose(panel.inspection.mean_attention(None, 5)[n], 1.0)
        await pilot.press("h")
        assert panel.head == -1
        assert "mean over 6 heads" in panel.render_inspection(panel.inspection).plain


# ---- surprise, token by token, in the TUI ---------------------------------------------------


async def test_alt_s_colours_the_reply_by_surprise_and_shows_its_perplexity():
    import math

    from helpers import SIZE, send, wait_until
    from textual.widgets import Static, TabbedContent

    from chatapp.chat.live_reply import LiveReply
    from chatapp.engine.protocol import Token
    from chatapp.ui.app import ChatApp
    from chatapp.ui.keys import help_rows

    engine = ScriptedEngine()
    app = ChatApp(lambda: engine)
    async with app.run_test(size=SIZE) as pilot:
        assert any(bid == "chat.surprise" for _, _, bid in help_rows(app))  # F1 lists it
        await send(pilot, app, "Hello there")
        await wait_until(
            pilot, lambda: pane(app).reply is None and pane(app).last_reply is not None
        )
        panel, strip = app.chat_screen.view.token_panel, app.chat_screen.view.token_panel.strip
        plain = [strip.render().spans[i].style for i in range(3)]
        await pilot.press("alt+s")
        assert app.query_one(TabbedContent).active == "tab-tokens"
        assert panel.surprise and strip.surprise
        legend = app.query_one("#surprise-legend", Static)
        assert legend.display
        n = len(panel.reply_tokens)  # every scripted token has logprob -0.69: perplexity ~2
        assert f"reply perplexity {math.exp(0.69):.2f} over {n} tokens" in str(legend.render())
        assert [strip.render().spans[i].style for i in range(3)] != plain

        # a sure token and a surprising one get different colours; the cursor still wins
        panel.reply = LiveReply(
            [Token(0, 1, b"a", "a", 0.0, -0.01), Token(1, 2, b"b", "b", 0.0, -9.0)]
        )
        await pilot.pause()
        spans = strip.render().spans
        assert spans[0].style.bgcolor != spans[1].style.bgcolor
        assert f"{math.exp((0.01 + 9.0) / 2):.2f} over 2 tokens" in str(legend.render())
        strip.focus()
        await pilot.press("home")
        assert strip.cursor == 0
        assert "surprise 0.0 bits" in str(app.query_one("#token-info", Static).render())
        await pilot.press("right")
        assert "surprise 13.0 bits" in str(app.query_one("#token-info", Static).render())

        await pilot.press("alt+s")
        assert not panel.surprise and not legend.display
        spans = strip.render().spans
        assert spans[1].style == strip.get_component_rich_style("tokenstrip--cursor")
