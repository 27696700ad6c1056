"""The lesson: inference in order, each step written from the numbers of this session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatapp import jsonfile, paths
from chatapp.chat.live_reply import LiveReply
from chatapp.engine.protocol import ModelInfo
from chatapp.models.device_speeds import DEVICES, GB
from chatapp.models.fit import gib, what_if
from chatapp.stats_text import decode_text, ms_text

LESSON_FILE = "lesson.json"
SEND_FIRST = (
    "Send a message first (F3 brings the chat where the panels cover it): this step's "
    "numbers come from it."
)


@dataclass(frozen=True)
class Facts:
    """What a step's text is written from: all measured in this session (None: not yet)."""

    info: ModelInfo | None = None
    reply: LiveReply | None = None  # the last reply (its stats and limits once finished)
    ceilings: dict[str, Any] | None = None  # machine.saved_ceilings()
    memory_bytes: int | None = None  # memory free for a model here


@dataclass(frozen=True)
class Step:
    """One step: what it is about, the panel it opens, what to try, and its text."""

    id: str
    title: str
    panel: str  # a tab id of the chat's side panels, or "stats" (the Speed panel)
    try_: str
    text: Callable[[Facts], str]

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "panel": self.panel, "try": self.try_}


def _card(f: Facts) -> str:
    i = f.info
    if i is None:
        return "The model is still loading: its card appears here once it is ready."
    params = f"{i.n_params / 1e6:,.0f} M parameters" if i.n_params else "its parameters"
    return (
        f"{Path(i.path).name}: {params} ({i.quant or 'precision unknown'}), "
        f"{i.n_layers} layers, a vocabulary of {i.n_vocab:,} tokens, "
        f"{gib(i.size_bytes)} on disk, loaded in {i.load_s:.1f} s. A reply is computed from "
        "these numbers, one token at a time; nothing is looked up."
    )


def _tokens(f: Facts) -> str:
    prompt = f.reply.prompt if f.reply else None
    if prompt is None:
        return "Type any sentence in the Tokens tab's box to see its tokens and ids. " + SEND_FIRST
    n = prompt.n_new + prompt.n_reused
    return (
        f"Your last message became a prompt of {n} tokens after the chat "
        f"template ({prompt.n_new} read now, {prompt.n_reused} reused from the cache). "
        "F4 shows the prompt the model really reads; F5 the ids."
    )


def _stream(f: Facts) -> str:
    r = f.reply
    if r is None or r.finished is None:
        return SEND_FIRST
    st = r.finished.stats
    return (
        f"The last reply: the wait before its first token (TTFT) was {ms_text(st.ttft_s)}, "
        f"reading the prompt's {st.prompt_evaluated} tokens; then "
        f"{decode_text(st.decode_tps or r.decode_tps)} for {st.completion_tokens} tokens, "
        "each one a full pass through the model. The sparkline is each token's pace."
    )


def _probs(f: Facts) -> str:
    r = f.reply
    tok = r.new[0] if r is not None and r.new else None
    if tok is None or not tok.candidates:
        return SEND_FIRST
    best = tok.candidates[0]
    name = best.piece.decode("utf-8", "replace")
    s = r.settings if r is not None else None
    knobs = f"temperature {s.temperature}, top-p {s.top_p}" if s else "the samplers"
    return (
        f"The first token of the last reply: {len(tok.candidates)} candidates shown; the best, "
        f"{name!r}, had p {best.p:.2f} before the samplers and {best.p_final:.2f} after "
        f"({knobs}). Move temperature or top-p (F6) during a reply; Enter on a row picks it."
    )


def _inside(f: Facts) -> str:
    if f.info is None:
        return "Wait for the model to load."
    return (
        f"The logit lens reads the guess after each of the {f.info.n_layers} layers of a "
        f"{f.info.n_embd}-wide residual stream: watch it sharpen layer by layer. Attention "
        "and embedding neighbours are in the same tab."
    )


def _steer(f: Facts) -> str:
    width = f.info.n_embd if f.info else 0
    return (
        f"A concept vector is {width or 'as many'} numbers, added to the residual stream at "
        "the layers you choose. Make one from two words, set its strength, and send a message: "
        "the reply leans toward it, live."
    )


def _gpu(f: Facts) -> str:
    lim = f.reply.limits if f.reply else None
    if lim is None:
        peak = (f.ceilings or {}).get("mem_read_gbps")
        if not peak:
            return (
                "This machine's ceilings are not measured yet: run `chatapp machine` "
                "(under 3 s), then send a message."
            )
        return f"This machine reads memory at {peak:.0f} GB/s (measured). " + SEND_FIRST
    ceilings = ", ".join(
        f"{d.name.split(' (')[0]} {d.bandwidth_gbps * GB / lim.bytes_per_token:,.0f} t/s"
        for d in DEVICES[2:]
    )
    return (
        f"Each token of the last reply read {gib(lim.bytes_per_token)} and did "
        f"{lim.flops_per_token / 1e9:.2f} GFLOPs: {lim.decode_gbps:.1f} GB/s of this machine's "
        f"measured {lim.mem_peak_gbps:.0f} GB/s ({lim.bound}-bound). The same bytes on a "
        f"GPU's bandwidth: {ceilings} at most."
    )


def _fit(f: Facts) -> str:
    if f.info is None or not f.memory_bytes:
        return "Wait for the model to load: this step compares it with this machine's memory."
    name, rows = what_if(8.0, f.memory_bytes)
    fits = [r.quant for r in rows if r.fits]
    bigger = f"a model like {name} fits at {', '.join(fits)}" if fits else f"{name} fits at none"
    return (
        f"This model takes {gib(f.info.size_bytes)} of the {gib(f.memory_bytes)} free here; "
        f"{bigger}. Fewer bits per weight: smaller and faster, a little less exact "
        "(F10 compares a quantized file with the original)."
    )


STEPS: tuple[Step, ...] = (
    Step("inference", "What inference is", "stats", "F9 opens the model card", _card),
    Step("tokens", "Text becomes tokens", "tab-tokens", "type a sentence in the box", _tokens),
    Step("stream", "One token at a time", "stats", "send a message, watch TTFT and t/s", _stream),
    Step("probs", "Probabilities", "tab-probs", "move temperature mid-reply (F6)", _probs),
    Step("inside", "Inside the model", "tab-inside", "run the logit lens on a prompt", _inside),
    Step("steer", "Touch it: steering", "tab-steer", "make a vector, send a message", _steer),
    Step("gpu", "Why a GPU", "tab-limits", "read the roofline after a reply", _gpu),
    Step("fit", "The model has to fit", "stats", "F10: compare a quantized file", _fit),
)
IDS = tuple(s.id for s in STEPS)


def step_index(step_id: str) -> int:
    """The index of a step by its id; ValueError naming the ids when there is none."""
    if step_id not in IDS:
        raise ValueError(f"no lesson step {step_id!r}: the steps are {', '.join(IDS)}")
    return IDS.index(step_id)


def _path() -> Path:
    return paths.data_dir() / LESSON_FILE


def remembered() -> int:
    """The step where the lesson stopped (0: the first, when none is saved or it is unknown)."""
    step = jsonfile.read_dict(_path()).get("step")
    return IDS.index(step) if step in IDS else 0


def remember(index: int) -> None:
    """Keep where the lesson is (a failed write only loses the place)."""
    try:
        paths.write_json_atomic(_path(), {"step": IDS[index]})
    except OSError:
        pass
