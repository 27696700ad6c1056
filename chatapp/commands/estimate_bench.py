"""`chatapp bench --estimate FILE...`: the quant picker's expected decode speed against a real
decode of each file, after a fresh calibration in the same run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chatapp.engine.protocol import LoadOptions


def print_estimate_bench(files: list[str], options: LoadOptions, reps: int, as_json: bool) -> int:
    """Calibrate on the bundled model, then for each file: estimate (from its size, as
    `pull --list` gives it before a download) vs measured decode t/s; `reps` alternating runs."""
    from chatapp.models.hub.speed import calibrate, measure_decode

    rows = []
    cals = []
    measured: dict[str, list[float]] = {f: [] for f in files}
    for rep in range(reps):
        print(f"run {rep + 1}/{reps}: calibrating on the bundled model", file=sys.stderr)
        cals.append(calibrate(options, force=True))
        for f in files:
            measured[f].append(measure_decode(f, options))
    bytes_per_s = sorted(c.bytes_per_s for c in cals)[len(cals) // 2]
    for f in files:
        size = Path(f).stat().st_size
        got = sorted(measured[f])[len(measured[f]) // 2]
        expected = bytes_per_s / size
        rows.append(
            {
                "file": Path(f).name,
                "size_bytes": size,
                "expected_decode_tps": expected,
                "measured_decode_tps": got,
                "ratio": expected / got,
            }
        )
    cal = cals[-1]
    if as_json:
        print(json.dumps({"bytes_per_s": bytes_per_s, "calibration": cal.model, "rows": rows}))
        return 0
    print(
        f"calibration: {cal.model}, {bytes_per_s / 1e9:.2f} GB/s of weights read per second "
        f"(median of {reps})"
    )
    print(f"{'file':<40} {'size':>9} {'expected':>9} {'measured':>9} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['file']:<40} {r['size_bytes'] / 1e6:>6.0f} MB {r['expected_decode_tps']:>9.1f} "
            f"{r['measured_decode_tps']:>9.1f} {r['ratio']:>5.2f}x"
        )
    return 0
