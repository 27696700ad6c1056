"""How `chatapp bench --busy`'s report reads as text: a few lines per row, then the timeline."""

from __future__ import annotations


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def row_lines(row: dict) -> list[str]:
    """One row's lines: the following engine's medians, the pinned engine and the references,
    and the ratios of each round's own runs (their medians)."""
    arms = row["arms"]
    f, p = arms["following"], arms["pinned"]
    ratio = row["following_over_pinned"]
    out = [
        f"{row['name']}: engine decode {f['decode_tps']:.1f} t/s, prefill "
        f"{f['prefill_tps']:.1f} t/s ({row['switches']} switches)",
        f"  engine pinned at {row['threads']} threads: decode {p['decode_tps']:.1f}, prefill "
        f"{p['prefill_tps']:.1f} (following / pinned: decode {_x(ratio['decode'])}, prefill "
        f"{_x(ratio['prefill'])})",
    ]
    for name, arm in arms.items():
        if name.startswith("llama-"):
            own = " (its own thread count)" if name == "llama-server" else ""
            out.append(
                f"  {name}{own}: decode {arm['decode_tps']:.1f}, prefill {arm['prefill_tps']:.1f}"
            )
    best = row.get("following_over_best_fixed")
    if best:
        out.append(
            f"  engine / best fixed (per round): decode {_x(best['decode'])}, "
            f"prefill {_x(best['prefill'])}"
        )
    return out


def timeline_lines(timeline: dict, load: str) -> list[str]:
    """A line per thread change of the timeline's reply, and when its load started and
    stopped."""
    lines = [
        f"{load} load on 1 of {timeline['cores']} cores from {timeline['start_s']:.1f} s to "
        f"{timeline['stop_s']:.1f} s"
    ]
    for s in timeline["switches"]:
        mark = ""
        if "after_load_started_s" in s:
            mark = f"  ({s['after_load_started_s']:.2f} s after the load started)"
        elif "after_load_stopped_s" in s:
            mark = f"  ({s['after_load_stopped_s']:.2f} s after it stopped)"
        lines.append(
            f"  {s['t_s']:6.2f} s  token {s['token']:>4}  -> {s['threads']} threads "
            f"({s['why']}){mark}"
        )
    return lines
