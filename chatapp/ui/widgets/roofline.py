"""The roofline chart: this machine's two ceilings and a reply's prefill and decode, log-log."""

from __future__ import annotations

import math

from textual_plotext import PlotextPlot

from chatapp.models.reply_limits import ReplyLimits

X_RANGE = (0.1, 10_000.0)  # FLOPs per byte: from below a matrix-vector product to big batches
POINTS = 48  # along the ceiling line


def ceiling_line(mem_gbps: float, peak_gflops: float) -> tuple[list[float], list[float]]:
    """The roofline: GFLOP/s reachable at each arithmetic intensity, min(peak, bandwidth x
    FLOPs per byte), on a log scale of intensities."""
    lo, hi = (math.log10(x) for x in X_RANGE)
    xs = [10 ** (lo + (hi - lo) * i / (POINTS - 1)) for i in range(POINTS)]
    return xs, [min(peak_gflops, mem_gbps * x) for x in xs]


def _log(values: list[float]) -> list[float]:
    return [math.log10(v) for v in values]


def _decades(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick positions (log10) and labels for each power of ten from lo to hi."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    powers = range(first, last + 1)
    return [float(p) for p in powers], [f"{10.0**p:g}" for p in powers]


class RooflineChart(PlotextPlot):
    """Where this reply's prefill and decode sit under the machine's ceilings."""

    DEFAULT_CSS = """
    RooflineChart { height: 1fr; min-height: 10; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.limits: ReplyLimits | None = None

    def show(self, limits: ReplyLimits | None) -> None:
        """Draw the ceilings and the reply's two points (None: an empty chart that says why)."""
        self.limits = limits
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("FLOPs per byte read")
        plt.ylabel("GFLOP/s")
        if limits is None or limits.mem_peak_gbps <= 0:
            plt.title("roofline: after a reply, with the machine's ceilings measured")
            self.refresh()
            return
        # log-log drawn as log10 values on plotext's linear axes, labelled in powers of ten:
        # plotext 5 (textual-plotext's) takes the log of the data in place at every build, so
        # its own log scale breaks on the second render (plotext issue #209)
        xs, ys = ceiling_line(limits.mem_peak_gbps, limits.compute_peak_gflops)
        plt.plot(_log(xs), _log(ys), label="ceiling", marker="braille")
        points = (
            ("decode", limits.decode_intensity, limits.decode_gflops),
            ("prefill", limits.prefill_intensity, limits.prefill_gflops),
        )
        shown = [y for _, x, y in points if x > 0 and y > 0]
        for name, x, y in points:
            if x > 0 and y > 0:
                plt.scatter(_log([x]), _log([y]), label=f"{name} {y:.1f} GFLOP/s", marker="dot")
        for ticks, limit, put in (
            (_decades(*X_RANGE), plt.xlim, plt.xticks),
            (_decades(min([ys[0], *shown]), max([ys[-1], *shown])), plt.ylim, plt.yticks),
        ):
            limit(ticks[0][0], ticks[0][-1])
            put(*ticks)
        plt.title(
            f"memory {limits.mem_peak_gbps:.1f} GB/s, compute {limits.compute_peak_gflops:.0f} "
            f"GFLOP/s: {limits.bound}-bound"
        )
        self.refresh()
