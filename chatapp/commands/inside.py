"""`chatapp inside`: what each layer would predict, what the token attended to, its neighbours;
and with --text, a text coloured by how surprised the model was by each of its tokens."""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from chatapp.commands.ask import started_engine, started_local
from chatapp.engine.inspection import Inspection, InspectRequest
from chatapp.engine.protocol import ChatMessage, EngineError, GenerateRequest, LoadOptions
from chatapp.textsafe import printable, token_display

LAST_LAYER_NOTE = (
    "the last layer's row can differ slightly from the final row: llama.cpp quantizes the "
    "activations before its own output matmul, this lens multiplies them in full precision"
)
SINK_SHARE = 0.3  # the first token's share of attention above which the sink is explained
SINK_NOTE = (
    "the first token draws {share:.0%} of the attention: an 'attention sink' - heads with "
    "nothing useful to read park their weight on it, so it says little about meaning"
)


def run_inside(
    prompt: str,
    options: LoadOptions,
    *,
    raw: bool,
    as_json: bool,
    heads: bool,
    layer: int | None,
    system: str | None = None,
    think: bool | None = None,
    top: int = 3,
) -> int:
    """Capture the pass that predicts the token after the prompt, and print it (top: tokens
    listed per depth of the lens)."""
    messages = ((ChatMessage("system", system),) if system else ()) + (ChatMessage("user", prompt),)
    request = GenerateRequest(
        messages=messages, raw_prompt=prompt if raw else None, enable_thinking=think
    )
    engine = started_engine(options)
    try:
        found = engine.inspect(InspectRequest(prompt=request, top=top))
    finally:
        engine.close()
    if layer is not None and not 1 <= layer <= found.n_layers:
        raise EngineError(f"--layer takes 1..{found.n_layers} for this model, not {layer}")
    if as_json:
        json.dump(as_dict(found, heads, layer), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(as_text(found, heads, layer))
    return 0


def _show(piece: bytes) -> str:
    """A token for a table cell: quoted, newlines as ↵, control characters visible."""
    return repr(token_display(piece).replace("↵\n", "↵"))


def _piece(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def _ranked(r) -> dict:
    return {"id": r.id, "piece": _piece(r.piece), "p": r.p}


def _nan_none(x: float):
    return None if x is None or math.isnan(x) else x


def as_dict(found: Inspection, heads: bool = False, layer: int | None = None) -> dict:
    """The JSON of `chatapp inside --json` (issue 28's keys, plus a few that explain them)."""
    layers = range(1, found.n_layers + 1) if layer is None else [layer]
    attention = []
    for il in layers:
        entry = {"layer": il, "weights": _weights(found.mean_attention(il))}
        if heads:
            entry["heads"] = [
                {"head": h, "kv_head": found.kv_head(h), "weights": _weights(row)}
                for h, row in enumerate(found.attention[il - 1])
            ]
        attention.append(entry)
    return {
        "position": found.position,
        "tokens": [
            {"id": t, "piece": _piece(p)} for t, p in zip(found.tokens, found.pieces, strict=True)
        ],
        "chosen": _ranked(found.chosen),
        "lens_ok": found.lens_ok,
        "lens_note": found.lens_note,
        "layers": [
            {
                "layer": lens.layer,
                "name": lens.name,
                "top": [_ranked(r) for r in lens.top],
                "chosen_rank": lens.chosen_rank,
                "chosen_p": _nan_none(lens.chosen_p),
            }
            for lens in found.layers
        ],
        "attention": attention,
        "n_head": found.n_head,
        "n_head_kv": found.n_head_kv,
        "neighbours_of": _ranked(found.chosen),
        "neighbours": [
            {"id": n.id, "piece": _piece(n.piece), "cosine": n.cosine} for n in found.neighbours
        ],
        "notes": list(found.notes),
        "timings_ms": {k: round(v, 2) for k, v in found.timings.items()},
    }


def _weights(row: np.ndarray) -> list[float | None]:
    return [None if math.isnan(x) else round(float(x), 6) for x in row]


def _bar(p: float, width: int = 20) -> str:
    if math.isnan(p):
        return ""
    full = p * width
    return "█" * int(full) + ("▌" if full - int(full) >= 0.5 else "")


def as_text(found: Inspection, heads: bool = False, layer: int | None = None) -> str:
    """A readable table: the lens by depth, the most attended tokens, the neighbours."""
    out = []
    chosen = _show(found.chosen.piece)
    out.append(
        f"next token after {found.position + 1} tokens: {chosen} "
        f"(p {found.chosen.p:.3f}, the model's own top token)"
    )
    out.append("")
    if found.lens_ok:
        n_top = max((len(lens.top) for lens in found.layers), default=3)
        cells = [
            "  ".join(f"{_show(r.piece)} {r.p:.2f}" for r in lens.top) for lens in found.layers
        ]
        width = min(max(44, *map(len, cells)), 44 if n_top <= 3 else 160)
        head = f"top {n_top} (p)"
        out.append(f"{'depth':<10} {head:<{width}} {'rank':>6} {'p':>6}  p of {chosen}")
        for lens, tops in zip(found.layers, cells, strict=True):
            if len(tops) > width:
                tops = tops[: width - 1] + "…"
            rank = str(lens.chosen_rank) if lens.chosen_rank else "-"
            p = "-" if math.isnan(lens.chosen_p) else f"{lens.chosen_p:.3f}"
            out.append(f"{lens.name:<10} {tops:<{width}} {rank:>6} {p:>6}  {_bar(lens.chosen_p)}")
        out.append(f"note: {LAST_LAYER_NOTE}")
    else:
        out.append(found.lens_note)
    out.append("")
    out.extend(_attention_lines(found, heads, layer))
    out.append("")
    near = ", ".join(f"{_show(n.piece)} {n.cosine:.2f}" for n in found.neighbours)
    out.append(f"nearest to {chosen} in the embedding (cosine): {near}")
    for note in found.notes:
        out.append(f"note: {note}")
    t = found.timings
    line = f"capture {t.get('total_ms', 0):.0f} ms ({t.get('prefilled', 0)} tokens evaluated)"
    if "setup_ms" in t:
        line += f", after {t['setup_ms']:.0f} ms reading the weights and making the context"
    out.append(line)
    return "\n".join(out) + "\n"


def _attention_lines(found: Inspection, heads: bool, layer: int | None) -> list[str]:
    where = "all layers" if layer is None else f"layer {layer}"
    mean = found.mean_attention(layer)
    out = [f"most attended ({where}, mean over {found.n_head} heads):"]
    for pos in np.argsort(-np.nan_to_num(mean, nan=-1.0))[:5]:
        piece = _show(found.pieces[pos])
        out.append(f"  {pos:>5}  {piece:<24} {mean[pos]:.3f}  {_bar(float(mean[pos]))}")
    if len(mean) > 1 and mean[0] >= SINK_SHARE:
        out.append(SINK_NOTE.format(share=float(mean[0])))
    if heads:
        # A head is a head of one layer: head h of layer 3 and head h of layer 20 are unrelated,
        # so without --layer the heads shown are the last layer's, never a mean over layers.
        shown = found.n_layers if layer is None else layer
        group = max(found.n_head // max(found.n_head_kv, 1), 1)
        pick = " (--layer picks another)" if layer is None else ""
        out.append(
            f"by head, layer {shown}{pick} ({found.n_head} query heads reading "
            f"{found.n_head_kv} KV heads, {group} per group): the 3 most attended"
        )
        for h, row in enumerate(found.attention[shown - 1]):
            best = np.argsort(-np.nan_to_num(row, nan=-1.0))[:3]
            cells = "  ".join(f"{_show(found.pieces[i])} {row[i]:.2f}" for i in best)
            out.append(f"  head {h:>2} (kv {found.kv_head(h)})  {cells}")
    return out


# ---- surprise: a text coloured by each token's probability ----------------------------------

# (lowest p, ANSI colour): green for the expected, then yellow, orange, red for surprises
SURPRISE_COLOURS = ((0.5, "32"), (0.1, "33"), (0.01, "38;5;208"), (0.0, "31"))


def run_surprise(path: str, options: LoadOptions, *, as_json: bool) -> int:
    """Score a text file and show each token by the probability the model gave it."""
    from chatapp.models.perplexity import read_text

    text = read_text(path)  # (one sentence for a file that cannot be read, before the load)
    engine = started_local(options)
    try:
        pieces = engine.tokenize(text, special=False)
        n_ctx = engine.info.n_ctx if engine.info else options.n_ctx
        cut = len(pieces) > n_ctx
        pieces = pieces[:n_ctx]
        if len(pieces) < 2:
            raise EngineError(f"{path} has fewer than 2 tokens: nothing to score")
        logprobs = engine.score([p.id for p in pieces])
    finally:
        engine.close()
    rows = surprise_rows(pieces, logprobs)
    ppl = math.exp(-sum(r["logprob"] for r in rows[1:]) / (len(rows) - 1))
    if as_json:
        payload = {
            "perplexity": ppl,
            "scored_tokens": len(rows) - 1,
            "truncated": cut,
            "tokens": rows,
        }
        json.dump(payload, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    colour = sys.stdout.isatty()
    sys.stdout.write(surprise_text(rows, colour) + "\n")
    legend = "  ".join(
        f"\x1b[{c}mp>={low:g}\x1b[0m" if colour else f"p>={low:g}" for low, c in SURPRISE_COLOURS
    )
    end = f" (the first {n_ctx} tokens: the context)" if cut else ""
    print(f"perplexity {ppl:.2f} over {len(rows) - 1} tokens{end}   {legend}", file=sys.stderr)
    return 0


def surprise_rows(pieces, logprobs: np.ndarray) -> list[dict]:
    """Per token: id, piece, logprob, p and rank (1 = the model's top candidate); the first
    token has no prediction (None)."""
    rows = [{"id": pieces[0].id, "piece": pieces[0].text, "logprob": None, "p": None, "rank": None}]
    for i, piece in enumerate(pieces[1:]):
        row = logprobs[i]
        lp = float(row[piece.id])
        rank = int((row > row[piece.id]).sum()) + 1
        rows.append(
            {"id": piece.id, "piece": piece.text, "logprob": lp, "p": math.exp(lp), "rank": rank}
        )
    return rows


def surprise_text(rows: list[dict], colour: bool) -> str:
    """The text, each token coloured by its p (no colour: the text as is)."""
    if not colour:
        return printable("".join(r["piece"] for r in rows))
    out = []
    for r in rows:
        code = "0" if r["p"] is None else next(c for low, c in SURPRISE_COLOURS if r["p"] >= low)
        out.append(f"\x1b[{code}m{printable(r['piece'])}\x1b[0m")
    return "".join(out)
