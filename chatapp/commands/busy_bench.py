"""`chatapp bench --busy`: the engine's speed while other programs spin on some of the cores,
against llama-bench at every fixed thread count under the same load, and when it switches."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from chatapp.commands.ask import started_engine
from chatapp.commands.bench import BENCH_SETTINGS, _prompt_ids, llama_bench_run
from chatapp.commands.bench_run import Run
from chatapp.engine.protocol import Finished, GenerateRequest, LoadOptions, Token
from chatapp.metrics import median

SPIN = "while True: pass"


@contextlib.contextmanager
def spinning(n: int) -> Iterator[list[subprocess.Popen]]:
    """n ordinary-priority processes that each keep one core busy, ended on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        time.sleep(0.3 if n else 0.0)  # let the scheduler see them
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def loads(cores: int) -> list[tuple[str, int]]:
    """The loads to measure under: none, one core busy, all but one busy (one row when the
    last two are the same, as on 2 cores)."""
    out = [("quiet", 0), (f"1 of {cores} cores busy", 1)]
    if cores > 2:
        out.append((f"{cores - 1} of {cores} cores busy", cores - 1))
    return out


def _engine_runs(engine, tokens: int, depth: int, reps: int) -> tuple[list[Run], list]:
    runs, switches = [], []
    for rep in range(reps):
        req = GenerateRequest(
            messages=(),
            settings=BENCH_SETTINGS.with_(max_tokens=tokens),
            prompt_ids=_prompt_ids(engine, depth, rep + 1),
            ignore_eos=True,
            top_n=10,
        )
        end = next(e for e in engine.generate(req) if isinstance(e, Finished))
        st = end.stats
        runs.append(Run(st.prefill_tps or 0.0, st.decode_tps or 0.0, st.completion_tokens))
        switches.append(st.thread_switches)
    return runs, switches


def timeline(engine, tokens: int, start_s: float, stop_s: float, cores: int) -> list[str]:
    """One long reply; a core is taken start_s after its first token and freed at stop_s.
    Returns a line per thread change: when (s from the first token), to how many, why, and how
    long after the load started or stopped."""
    req = GenerateRequest(
        messages=(),
        settings=BENCH_SETTINGS.with_(max_tokens=tokens),
        prompt_ids=_prompt_ids(engine, 64, 0),
        ignore_eos=True,
        top_n=10,
    )
    times: dict[int, float] = {}
    load: contextlib.ExitStack | None = None
    t_first = started = stopped = None
    switches: tuple = ()
    with contextlib.ExitStack() as stack:
        for event in engine.generate(req):
            now = time.perf_counter()
            if isinstance(event, Token):
                times[event.index] = event.t
                t_first = t_first or event.t
            if t_first is not None and started is None and now - t_first >= start_s:
                load = contextlib.ExitStack()
                stack.enter_context(load)
                load.enter_context(spinning(1))
                started = time.perf_counter()
            if (
                t_first is not None
                and load is not None
                and stopped is None
                and now - t_first >= stop_s
            ):
                load.close()
                stopped = time.perf_counter()
            if isinstance(event, Finished):
                switches = event.stats.thread_switches
    lines = [f"load on 1 of {cores} cores from {start_s:.1f} s to {stop_s:.1f} s"]
    for index, threads, why in switches:
        t = times.get(index)
        if t is None or t_first is None:
            continue
        mark = ""
        if started is not None and t >= started and (stopped is None or t < stopped):
            mark = f"  ({t - started:.2f} s after the load started)"
        elif stopped is not None and t >= stopped:
            mark = f"  ({t - stopped:.2f} s after it stopped)"
        lines.append(
            f"  {t - t_first:6.2f} s  token {index:>4}  -> {threads} threads ({why}){mark}"
        )
    return lines


def busy_report(
    options: LoadOptions, tokens: int, depth: int, reps: int, llama_bench: Path | None
) -> list[str]:
    """The comparison under each load, as lines of text."""
    cores = os.cpu_count() or 1
    lines = []
    engine = started_engine(options)
    most = engine.info.n_threads if engine.info else options.threads
    pinned = started_engine(replace(options, n_threads=most))  # today's: the count fixed
    try:
        for name, busy in loads(cores):
            with spinning(busy):
                runs, switches = _engine_runs(engine, tokens, depth, reps)
                fixed_runs, _ = _engine_runs(pinned, tokens, depth, reps)
                fixed = {}
                if llama_bench is not None:
                    for t in range(1, most + 1):
                        fixed[t] = llama_bench_run(
                            llama_bench, replace(options, n_threads=t), depth, tokens,
                            "engine", in_memory=bool(engine.info and engine.info.weights_in_memory),
                        )  # fmt: skip
            lines += _rows(name, runs, switches, fixed, fixed_runs, most)
        lines += timeline(engine, max(tokens * 4, 400), 1.0, 4.0, cores)
    finally:
        engine.close()
        pinned.close()
    return lines


def _rows(
    name: str, runs: list[Run], switches: list, fixed: dict[int, Run], pinned: list[Run], most: int
) -> list[str]:
    dec = median([r.decode_tps for r in runs])
    pre = median([r.prefill_tps for r in runs])
    changed = sum(len(s) for s in switches)
    out = [f"{name}: engine decode {dec:.1f} t/s, prefill {pre:.1f} t/s ({changed} switches)"]
    p_dec = median([r.decode_tps for r in pinned])
    p_pre = median([r.prefill_tps for r in pinned])
    out.append(
        f"  engine pinned at {most} threads: decode {p_dec:.1f}, prefill {p_pre:.1f} "
        f"(following / pinned: decode {dec / p_dec:.3f}x, prefill {pre / p_pre:.3f}x)"
    )
    if fixed:
        best_dec = max(fixed.values(), key=lambda r: r.decode_tps)
        best_pre = max(fixed.values(), key=lambda r: r.prefill_tps)
        for t, r in fixed.items():
            out.append(
                f"  llama-bench -t {t}: decode {r.decode_tps:.1f}, prefill {r.prefill_tps:.1f}"
            )
        out.append(
            f"  engine / best fixed: decode {dec / best_dec.decode_tps:.3f}x, "
            f"prefill {pre / best_pre.prefill_tps:.3f}x"
        )
    return out


def print_busy_bench(
    options: LoadOptions, tokens: int, depth: int, reps: int, llama_bench: Path | None
) -> int:
    for line in busy_report(options, tokens, depth, reps, llama_bench):
        print(line, flush=True)
    return 0
