"""`chatapp bench --estimate FILE...`: the quant picker's expected decode speed against a real
decode of each file, with the calibration measured again in the same run."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import TypedDict

from chatapp.engine.protocol import LoadOptions


class EstimateRow(TypedDict):
    """One file's medians over the repetitions (a row of the table and of --json)."""

    file: str
    size_bytes: int
    expected_decode_tps: float
    measured_decode_tps: float
    ratio: float


def print_estimate_bench(files: list[str], options: LoadOptions, reps: int, as_json: bool) -> int:
    """Each repetition calibrates (memory read rate, the bundled model's decode), then decodes
    each file; a file's figure is the median over repetitions of expected / measured."""
    from chatapp.gguf.header import inspect
    from chatapp.models.hub.speed import calibrate, measure_decode

    ratios: dict[str, list[float]] = {f: [] for f in files}
    measured: dict[str, list[float]] = {f: [] for f in files}
    expected: dict[str, list[float]] = {f: [] for f in files}
    cals = []
    for rep in range(reps):
        print(f"run {rep + 1}/{reps}: calibrating, then {len(files)} files", file=sys.stderr)
        cal = calibrate(options, force=True)
        cals.append(cal)
        for f in files:
            got = measure_decode(f, options)
            want = cal.expected_tps(Path(f).stat().st_size, inspect(f).n_params)
            measured[f].append(got)
            expected[f].append(want)
            ratios[f].append(want / got)
    rows: list[EstimateRow] = [
        {
            "file": Path(f).name,
            "size_bytes": Path(f).stat().st_size,
            "expected_decode_tps": statistics.median(expected[f]),
            "measured_decode_tps": statistics.median(measured[f]),
            "ratio": statistics.median(ratios[f]),
        }
        for f in files
    ]
    read = statistics.median(c.bytes_per_s for c in cals)
    bundled = statistics.median(c.decode_tps for c in cals)
    if as_json:
        print(json.dumps({"read_bytes_per_s": read, "bundled_decode_tps": bundled, "rows": rows}))
        return 0
    print(
        f"calibration ({reps} runs, medians): memory read {read / 1e9:.1f} GB/s, "
        f"{cals[-1].model} decode {bundled:.1f} t/s"
    )
    print(f"{'file':<40} {'size':>9} {'expected':>9} {'measured':>9} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['file']:<40} {r['size_bytes'] / 1e6:>6.0f} MB {r['expected_decode_tps']:>9.1f} "
            f"{r['measured_decode_tps']:>9.1f} {r['ratio']:>5.2f}x"
        )
    return 0
