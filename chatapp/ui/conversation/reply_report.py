"""The Speed panel's note on a finished reply: where its time went, and what drafting did."""

from __future__ import annotations

from chatapp import breakdown, machine
from chatapp.engine.protocol import Finished
from chatapp.models.reply_limits import ReplyLimits, limits_of_reply
from chatapp.stats_text import draft_text
from chatapp.ui.widgets.live_panel import LoadedModel

PLAIN_MIN_TOKENS = 16  # a plain reply shorter than this says little about decode speed


class ReplyReport:
    """Remembers the last plain (undrafted) decode rate per model, the comparison a reply with
    drafts is shown against."""

    def __init__(self) -> None:
        self.plain_tps: dict[str, float] = {}

    def note(
        self,
        ev: Finished,
        model: str,
        first_paint_s: float | None = None,
        limits: ReplyLimits | None = None,
    ) -> str:
        st = ev.stats
        ui_s = breakdown.ui_share(st, first_paint_s)
        lines = [f"why: {breakdown.verdict(st, ui_s=ui_s)}"]
        if limits is not None:
            lines.append(limits.line())
        if len(ev.alternatives) > 1:
            n = len(ev.alternatives)
            line = f"{n} replies in one batch: {st.decode_tps or 0:.1f} t/s together"
            plain = self.plain_tps.get(model)
            if plain and st.decode_tps:
                line += f", {st.decode_tps / plain:.2f}x one reply ({plain:.1f} t/s)"
            lines.append(line + "; alt+left/right switch between them")
        elif st.draft:
            line = draft_text(st)
            plain = self.plain_tps.get(model)
            if plain and st.decode_tps:
                line += f"; {st.decode_tps / plain:.2f}x the last plain reply ({plain:.1f} t/s)"
            else:
                line += "; no plain reply on this model yet to compare with"
            lines.append(line)
        elif st.decode_tps and st.completion_tokens >= PLAIN_MIN_TOKENS:
            self.plain_tps[model] = st.decode_tps
        return "\n".join(lines)


def limits_of(model: LoadedModel | None, ev: Finished) -> ReplyLimits | None:
    """The finished reply against this machine's ceilings, where its engine can tell (a local
    model file) and the ceilings were measured (the tune on first use, `chatapp machine`)."""
    if model is None or model.info is None or not model.capabilities.limits:
        return None
    if not ev.stats.completion_tokens:
        return None
    return limits_of_reply(model.info.path, ev.stats, machine.saved_ceilings())
