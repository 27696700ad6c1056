"""One way the numbers of a reply read: footer, stats panel, `chatapp ask`, history."""

from __future__ import annotations

from chatapp.engine.protocol import Finished, StopReason
from chatapp.metrics import GenerationStats
from chatapp.stats_text import (
    decode_text,
    ms_text,
    prefill_text,
    speed_parts,
    stats_footer,
    ttft_text,
)


def test_numbers_read_the_same_everywhere() -> None:
    assert ttft_text(0.0734) == "73 ms" and ms_text(None, "–") == "–"
    assert prefill_text(812.4) == "812 t/s" and prefill_text(None) == "n/a"
    assert decode_text(80.44) == "80.4 t/s"
    assert speed_parts(0.0734, None, 0.0) == ["TTFT 73 ms"]  # unmeasured rates are left out


def test_footer_and_ask_line() -> None:
    from chatapp.commands.ask import stats_line
    from chatapp.ui.conversation.reply import stats_footer as reply_footer

    assert reply_footer is stats_footer
    line = stats_footer("Q4_1", 0.05, 812.4, 80.44, 12, "eog", ["settings changed at token 3"])
    assert line == (
        "Q4_1 · TTFT 50 ms · prefill 812 t/s · decode 80.4 t/s · 12 tokens · stop: eog"
        " · settings changed at token 3"
    )
    st = GenerationStats(prompt_evaluated=4, completion_tokens=1, ttft_s=0.05, prefill_s=0.01)
    assert stats_line(Finished(StopReason.MAX_TOKENS, "x", st)) == (
        "TTFT 50 ms | prefill 400 t/s (4 tok) | decode n/a | 1 tokens | stop: max_tokens"
    )
