"""`chatapp bench --ui`: stream replies through the real app headless and measure its overhead."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass

from chatapp.config import Config
from chatapp.engine.protocol import ChatMessage, LoadOptions
from chatapp.errors import ChatappError
from chatapp.metrics import median
from chatapp.sampling import SamplerSettings

PROMPT = "Write a long story about a lighthouse keeper and the sea."
FILLER = "A earlier message with **some Markdown**, a list:\n\n- one\n- two\n\nand `code`."


class BenchError(ChatappError):
    """The benchmark could not run (the model did not load)."""


@dataclass
class UiRun:
    history: int
    tokens: int
    engine_decode_tps: float
    ui_decode_tps: float
    engine_ttft_ms: float
    first_paint_ms: float
    paint_overhead_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    reply_wall_s: float


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


async def _one_reply(app, pilot, history: int, tokens: int) -> UiRun:
    from chatapp.ui.widgets.chat import MessageView

    pane = app.chat_screen.pane
    await pane.new_chat()
    if history:
        # Earlier messages on screen; the prompt sent stays the same short conversation.
        views = [MessageView("user" if i % 2 == 0 else "assistant", FILLER) for i in range(history)]
        await pane.chat.add_items(views)
        await pilot.pause(0.5)
    hello = [ChatMessage("user", "Hello."), ChatMessage("assistant", "Hi there!")]
    pane.session.conversation = hello
    pane.session.settings = SamplerSettings(temperature=0.0, max_tokens=tokens)
    lags: list[float] = []
    tick = 0.005
    last = time.perf_counter()

    def on_tick() -> None:
        nonlocal last
        now = time.perf_counter()
        lags.append(max(0.0, now - last - tick))
        last = now

    timer = app.set_interval(tick, on_tick)
    t0 = time.perf_counter()
    await pane.send(PROMPT)
    while pane.reply is not None:
        await asyncio.sleep(0.005)
    wall = time.perf_counter() - t0
    timer.stop()
    paints = pane.paint_log
    reply = pane.last_reply
    st = reply.finished.stats
    n_after_first = sum(n for _, n in paints[1:])
    span = paints[-1][0] - paints[0][0] if len(paints) > 1 else 0.0
    ui_tps = n_after_first / span if span > 0 else 0.0
    engine_ttft = reply.tokens[0].t - reply.submitted
    first_paint = reply.first_paint_s or 0.0
    return UiRun(
        history=history,
        tokens=len(reply.tokens),
        engine_decode_tps=st.decode_tps or 0.0,
        ui_decode_tps=ui_tps,
        engine_ttft_ms=engine_ttft * 1000,
        first_paint_ms=first_paint * 1000,
        paint_overhead_ms=(first_paint - engine_ttft) * 1000,
        lag_p99_ms=_p99(lags) * 1000,
        lag_max_ms=max(lags, default=0.0) * 1000,
        reply_wall_s=wall,
    )


async def _bench(options: LoadOptions, tokens: int, reps: int) -> dict:
    from chatapp.engine.factory import make_engine
    from chatapp.ui.app import ChatApp
    from chatapp.ui.streaming import WORKER_NICE

    # as `chatapp chat` runs it, without a tune on first use changing settings mid-run
    app = ChatApp(lambda: make_engine(options, nice=WORKER_NICE), config=Config(autotune=False))
    app.chat_screen.session.ignore_eos = True
    runs: list[UiRun] = []
    async with app.run_test(size=(120, 40)) as pilot:
        while app.slot.engine is None:
            if app.slot.load_error is not None:
                raise BenchError(app.slot.load_error)
            await pilot.pause(0.05)
        await _one_reply(app, pilot, 0, 16)  # warm-up: caches, first renders
        for _ in range(reps):
            runs.append(await _one_reply(app, pilot, 5, tokens))
            runs.append(await _one_reply(app, pilot, 500, tokens))
    small = [r for r in runs if r.history == 5]
    big = [r for r in runs if r.history == 500]

    def med(rs: list[UiRun], key: str) -> float:
        return median([getattr(r, key) for r in rs])

    return {
        "tokens": tokens,
        "reps": reps,
        "ui_over_engine_decode": med(small, "ui_decode_tps") / med(small, "engine_decode_tps"),
        "paint_minus_ttft_ms": med(small, "paint_overhead_ms"),
        "lag_p99_ms": med(small, "lag_p99_ms"),
        # Paired: each repetition ran its two replies back to back, so machine drift cancels.
        "reply_cost_500_over_5": median(
            [b.reply_wall_s / s.reply_wall_s for s, b in zip(small, big, strict=True)]
        ),
        "ui_over_engine_decode_500": med(big, "ui_decode_tps") / med(big, "engine_decode_tps"),
        "lag_p99_ms_500": med(big, "lag_p99_ms"),
        "runs": [asdict(r) for r in runs],
    }


def run_ui_bench(options: LoadOptions, tokens: int, reps: int, as_json: bool) -> int:
    """The headless app against its own engine, then the real TUI under tmux against
    `chatapp ask` (separate processes, alternating), where tmux is installed."""
    import shutil
    import sys

    from chatapp.ui.bench.terminal_bench import print_terminal_report, run_terminal_bench

    try:
        report = asyncio.run(_bench(options, tokens, reps))
    except BenchError as exc:
        print(f"error: the model did not load: {exc}", file=sys.stderr)
        return 1
    if shutil.which("tmux") is not None:
        report["terminal"] = run_terminal_bench(options, tokens, reps)
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    _print_headless(report, tokens, reps)
    if "terminal" in report:
        print_terminal_report(report["terminal"])
    else:
        print("(tmux is not installed: the real-terminal half of the benchmark did not run)")
    return 0


def _print_headless(report: dict, tokens: int, reps: int) -> None:
    print(f"UI benchmark (headless app vs its engine): {tokens} tokens per reply, median of {reps}")
    ratio = report["ui_over_engine_decode"]
    print(f"  UI decode / engine decode       {ratio:.3f}x (goal >= 0.97)")
    print(f"  first paint - engine TTFT       {report['paint_minus_ttft_ms']:.1f} ms (goal <= 30)")
    print(f"  event-loop lag p99              {report['lag_p99_ms']:.1f} ms (goal < 50)")
    print(f"  reply after 500 msgs / after 5  {report['reply_cost_500_over_5']:.3f}x (goal <= 1.2)")
    print(
        f"  (after 500: UI/engine decode {report['ui_over_engine_decode_500']:.3f}x, "
        f"lag p99 {report['lag_p99_ms_500']:.1f} ms)"
    )
    for r in report["runs"]:
        print(
            f"  history {r['history']:>3}: engine {r['engine_decode_tps']:.1f} t/s, "
            f"ui {r['ui_decode_tps']:.1f} t/s, paint-ttft {r['paint_overhead_ms']:.1f} ms, "
            f"lag p99 {r['lag_p99_ms']:.1f} ms, wall {r['reply_wall_s']:.2f} s"
        )
