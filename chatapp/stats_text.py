"""How a reply's numbers read, in every place that shows them (footer, stats panel, `chatapp
ask`, history): TTFT in milliseconds, prefill in whole tokens/s, decode to a tenth (pure)."""

from __future__ import annotations

from collections.abc import Sequence

NA = "n/a"
"""What a number that was not measured reads as, where its place must be filled."""

MS_FORMAT = ".0f"  # TTFT and other latencies, in milliseconds
PREFILL_FORMAT = ".0f"  # prompt tokens per second (hundreds to thousands: no decimals)
DECODE_FORMAT = ".1f"  # generated tokens per second


def ms_text(seconds: float | None, missing: str = NA) -> str:
    """A latency in milliseconds: '73 ms'."""
    return missing if seconds is None else f"{seconds * 1000:{MS_FORMAT}} ms"


def ttft_text(ttft_s: float | None, missing: str = NA) -> str:
    """Time to first token: '73 ms'."""
    return ms_text(ttft_s, missing)


def prefill_text(tps: float | None, missing: str = NA) -> str:
    """Prompt evaluation speed: '812 t/s'."""
    return missing if tps is None else f"{tps:{PREFILL_FORMAT}} t/s"


def decode_text(tps: float | None, missing: str = NA) -> str:
    """Generation speed: '80.4 t/s'."""
    return missing if tps is None else f"{tps:{DECODE_FORMAT}} t/s"


def tokens_text(n: int) -> str:
    return f"{n} tokens"


def stop_text(reason: object) -> str:
    return f"stop: {reason}"


def draft_text(stats) -> str:
    """Speculative decoding of a reply: 'ngram drafts 212/230 accepted (92%), 7.1 per batch'."""
    if not stats.draft:
        return ""
    if not stats.draft_tokens:
        return f"{stats.draft} drafts: none"
    return (
        f"{stats.draft} drafts {stats.draft_accepted}/{stats.draft_tokens} accepted "
        f"({stats.acceptance:.0%}), {stats.mean_accepted:.1f} per batch"
    )


def speed_parts(
    ttft_s: float | None, prefill_tps: float | None, decode_tps: float | None
) -> list[str]:
    """'TTFT 73 ms', 'prefill 812 t/s', 'decode 80.4 t/s': those that were measured (a rate
    of 0 was not)."""
    parts = [] if ttft_s is None else [f"TTFT {ttft_text(ttft_s)}"]
    if prefill_tps:
        parts.append(f"prefill {prefill_text(prefill_tps)}")
    if decode_tps:
        parts.append(f"decode {decode_text(decode_tps)}")
    return parts


def stats_footer(
    quant: str | None,
    ttft_s: float | None,
    prefill_tps: float | None,
    decode_tps: float | None,
    tokens: int | None,
    stop: str | None,
    extra: Sequence[str] = (),
) -> str:
    """The stats line under a reply: quant · TTFT · prefill · decode · tokens · stop."""
    parts = [quant] if quant else []
    parts += speed_parts(ttft_s, prefill_tps, decode_tps)
    if tokens is not None:
        parts.append(tokens_text(tokens))
    if stop:
        parts.append(stop_text(stop))
    return " · ".join([*parts, *extra])


def threads_text(st) -> str:
    """'1 of 2: another program is busy' while the count is below the quiet one; '2 of 2
    (changed 3 times)' once back; '2' when it never moved; '' when unknown (a server)."""
    if not st.threads_most:
        return ""
    changes = len(st.thread_switches)
    if st.threads < st.threads_most:
        return f"{st.threads} of {st.threads_most}: another program is busy"
    if changes:
        return f"{st.threads} of {st.threads_most} (changed {changes} times)"
    return f"{st.threads}"
