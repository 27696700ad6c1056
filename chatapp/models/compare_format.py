"""A comparison as a table with bars, JSON, CSV or Markdown."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

from chatapp.models.compare_ceilings import order_note
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.stats_text import DECODE_FORMAT, MS_FORMAT, PREFILL_FORMAT

COLUMNS = (  # (header, getter, format)
    ("file", lambda r: r.name, "{}"),
    ("quant", lambda r: r.quant, "{}"),
    ("size MiB", lambda r: r.size_bytes / 2**20, "{:.1f}"),
    ("load s", lambda r: r.load_s, "{:.2f}"),
    ("RSS MiB", lambda r: None if r.peak_rss_bytes is None else r.peak_rss_bytes / 2**20, "{:.0f}"),
    ("TTFT ms", lambda r: None if r.ttft_s is None else r.ttft_s * 1000, f"{{:{MS_FORMAT}}}"),
    ("prefill t/s", lambda r: r.prefill_tps, f"{{:{PREFILL_FORMAT}}}"),
    ("decode t/s", lambda r: r.decode_tps, f"{{:{DECODE_FORMAT}}}"),
    ("top-1 %", lambda r: None if r.top1_agreement is None else r.top1_agreement * 100, "{:.1f}"),
    ("KL", lambda r: r.mean_kl, "{:.4f}"),
    ("PPL", lambda r: r.perplexity, "{:.2f}"),
)  # fmt: skip


TEXT_COLUMNS = (  # with --text: llama-perplexity's figures (uncertainties after the table)
    ("PPL ±", lambda r: r.perplexity_err, "{:.3f}"),
    ("PPL ratio", lambda r: r.ppl_ratio, "{:.4f}"),
    ("KLD 99%", lambda r: r.kld_p99, "{:.4f}"),
    ("RMS Δp %", lambda r: _pct(r.rms_dp), "{:.2f}"),
    ("tokens", lambda r: r.scored_tokens or None, "{}"),
    ("score s", lambda r: r.score_s, "{:.1f}"),
)


def table_columns(text: bool) -> tuple:
    """The table's columns; with `text` (a run with --text) llama-perplexity's figures too."""
    if text:
        top1 = ("same top %", COLUMNS[8][1], COLUMNS[8][2])
        return (*COLUMNS[:8], top1, *COLUMNS[9:], *TEXT_COLUMNS)
    return COLUMNS


def _columns(result: CompareResult) -> tuple:
    return table_columns(bool(result.text_file))


SPEED_COLUMNS = ("TTFT ms", "prefill t/s", "decode t/s")


def _cells(r: RunResult, columns: tuple = COLUMNS) -> list[str]:
    """A row's cells; a speed measured beside a busy program is marked '*' (see its note)."""
    mark = "*" if r.disturbed else ""
    return [
        "-" if (v := get(r)) is None else fmt.format(v) + (mark if head in SPEED_COLUMNS else "")
        for head, get, fmt in columns
    ]


def _bar(value: float, top: float, width: int = 24) -> str:
    eighths = int(round(width * 8 * value / top)) if top > 0 else 0
    full, part = divmod(max(eighths, 0), 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100


BARS = (
    ("decode speed", lambda r: r.decode_tps, " t/s"),
    ("top-1 agreement with the reference", lambda r: _pct(r.top1_agreement), " %"),
    ("size", lambda r: r.size_bytes / 2**20, " MiB"),
)


def format_table(result: CompareResult) -> str:
    """A text table, then bars for decode speed, agreement and size."""
    columns = _columns(result)
    header = [h for h, _, _ in columns]
    rows = [_cells(r, columns) for r in result.runs]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs)

    out = [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    name_w = max(len(r.name) for r in result.runs)
    for title, get, unit in BARS:
        values = [get(r) or 0.0 for r in result.runs]
        top = max(values, default=0.0)
        out += ["", title]
        for r, v in zip(result.runs, values, strict=True):
            mark = " *" if r.disturbed and title == "decode speed" else ""
            out.append(f"  {r.name.ljust(name_w)}  {_bar(v, top)} {v:.1f}{unit}{mark}")
    if result.text_file:
        scored = max((r.scored_tokens for r in result.runs), default=0)
        scored_on = f"{scored} tokens of {result.text_file} scored in chunks of {result.text_ctx}"
    else:
        scored_on = f"{result.text_tokens} text tokens scored"
    out += [
        "",
        f"reference: {result.reference}; {scored_on}; "
        f"{result.tokens} tokens generated greedily; {result.wall_s:.1f} s in all",
    ]
    out += ceiling_lines(result, name_w)
    out += [f"! {r.name}: {r.error or r.note}" for r in result.runs if r.error or r.note]
    return "\n".join(out)


def ceiling_lines(result: CompareResult, name_w: int) -> list[str]:
    """Each file's decode ceiling here (the measured read bandwidth over the bytes a token
    reads), what its decode reached of it, and whether the speeds follow the ceilings."""
    runs = [r for r in result.runs if r.decode_ceiling_tps]
    if not runs or not result.mem_read_gbps:
        return []
    out = ["", f"decode ceiling here: {result.mem_read_gbps:.1f} GB/s read / bytes per token"]
    for r in runs:
        share = f"{r.ceiling_share:.0%}" if r.ceiling_share is not None else "-"
        out.append(
            f"  {r.name.ljust(name_w)}  {r.bytes_per_token / 1e6:7.1f} MB a token  "
            f"ceiling {r.decode_ceiling_tps or 0:7.1f} t/s  reached {share}"
        )
    return [*out, f"  {order_note(result.runs)}"]


def to_json(result: CompareResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


def to_csv(result: CompareResult) -> str:
    buf = io.StringIO()
    names = [f.name for f in RunResult.__dataclass_fields__.values() if f.name != "text"]
    writer = csv.DictWriter(buf, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in result.runs:
        writer.writerow(asdict(r))
    return buf.getvalue()


def to_markdown(result: CompareResult) -> str:
    columns = _columns(result)
    header = [h for h, _, _ in columns]
    aligns = ["---"] * 2 + ["---:"] * (len(columns) - 2)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(_cells(r, columns)) + " |" for r in result.runs]
    return "\n".join(lines)
