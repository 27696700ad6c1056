"""`chatapp tune`: measure this machine's best threads / flash attention / repack for a file."""

from __future__ import annotations

import json
import sys

from chatapp import cpus, machine
from chatapp.engine.local.load import tune_measurements
from chatapp.engine.protocol import LoadOptions


def run_tune(options: LoadOptions, tokens: int, depths: tuple[int, ...], as_json: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from chatapp.engine.factory import make_engine

    probe = make_engine(options)  # which extra buffers this file gets here, and whether it loads
    info = probe.start()
    for note in probe.notes:
        print(f"note: {note}", file=sys.stderr)
    probe.close()
    repacks = [True, False] if info.extra_buffers else [info.repack]
    chosen_depths = tune_measurements.depths_for(options.n_ctx, tokens, depths)
    configs = tune_measurements.configs(repacks)
    results: list[tune_measurements.Measured] = []
    with Progress(
        TextColumn("[bold]tune[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("loading", total=len(configs) * len(chosen_depths))
        for config in configs:

            def step(what: str) -> None:
                bar.update(task, advance=1, description=what)

            result = tune_measurements.measure_one(
                make_engine, options, config, chosen_depths, tokens, step
            )
            if result.error:
                bar.update(task, advance=len(chosen_depths) - len(result.decode))
            results.append(result)
    winner = tune_measurements.best(results)
    if winner is not None:
        saved = tune_measurements.saved_form(
            winner, options, chosen_depths, info.gpu_offload_supported
        )
        machine.remember_tuned(options.model_path, saved)
    if as_json:
        print(json.dumps(_report(options, results, winner, chosen_depths), indent=2))
    else:
        print(format_table(options, results, winner, chosen_depths, info.extra_buffers))
    return 0 if winner is not None else 1


def _report(options, results, winner, depths) -> dict:
    return {
        "model": options.model_path,
        "machine": machine.machine_key(),
        "build": machine.build_key(),
        "depths": depths,
        "results": [
            {
                **r.config.__dict__,
                "decode_tps": {str(d): v for d, v in r.decode.items()},
                "prefill_tps": r.prefill,
                "score": r.score,
                "error": r.error,
            }
            for r in results
        ],
        "best": None if winner is None else winner.config.__dict__,
    }


def format_table(options, results, winner, depths, buffers) -> str:
    head = f"{'':<34}" + "".join(f"{'decode @' + str(d):>13}" for d in depths)
    lines = [
        f"{options.model_path}",
        f"{machine.cpu_name()}, {cpus.usable_cores()} cores / {cpus.usable_cpus()} CPUs "
        f"usable; extra CPU buffers: {', '.join(buffers) or 'none'}",
        head + f"{'prefill':>11}",
    ]
    for r in results:
        mark = "*" if r is winner else " "
        if r.error:
            lines.append(f"{mark} {r.config.label():<32} {r.error}")
            continue
        cells = "".join(f"{r.decode.get(d, 0):>13.1f}" for d in depths)
        lines.append(f"{mark} {r.config.label():<32}{cells}{r.prefill:>11.1f}")
    if winner is None:
        lines.append("no configuration ran; nothing saved")
    else:
        slowest = min((r for r in results if not r.error), key=lambda r: r.score)
        lines.append(
            f"* best (t/s, geometric mean of decode over the depths): {winner.config.label()}, "
            f"{winner.score / slowest.score:.2f}x the slowest; saved: chat, ask, compare and "
            "bench use it for this file unless told otherwise"
        )
    return "\n".join(lines)
