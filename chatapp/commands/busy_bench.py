"""`chatapp bench --busy`: the engine's speed while other programs spin on some of the cores,
against llama-bench at every fixed thread count under the same load, and when it switches."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from chatapp.commands.ask import started_engine
from chatapp.commands.bench import BENCH_SETTINGS, _prompt_ids, llama_bench_run
from chatapp.commands.bench_run import Run, interleaved
from chatapp.cpus import usable_cpus
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


def _engine_run(engine, tokens: int, depth: int, rep: int) -> tuple[Run, tuple]:
    """One reply on repetition rep's own prompt: its speeds and the thread switches it made."""
    req = GenerateRequest(
        messages=(),
        settings=BENCH_SETTINGS.with_(max_tokens=tokens),
        prompt_ids=_prompt_ids(engine, depth, rep + 1),
        ignore_eos=True,
        top_n=10,
    )
    end = next(e for e in engine.generate(req) if isinstance(e, Finished))
    st = end.stats
    return Run(st.prefill_tps or 0.0, st.decode_tps or 0.0, st.completion_tokens), tuple(
        st.thread_switches
    )


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
                started = time.perf_counter()  # (spinning() waits 0.3 s after starting it)
                load.enter_context(spinning(1))
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
    cores = usable_cpus()
    lines = []
    engine = started_engine(options)
    most = engine.info.n_threads if engine.info else options.threads
    pinned = started_engine(replace(options, n_threads=most))  # today's: the count fixed
    try:
        for side in (engine, pinned):  # warm-up: caches, the template, the first decode's costs
            _engine_run(side, 8, depth, reps)
        in_memory = bool(engine.info and engine.info.weights_in_memory)
        for name, busy in loads(cores):
            arms: dict[str, Callable[[int], tuple[Run, tuple]]] = {
                "following": lambda rep: _engine_run(engine, tokens, depth, rep),
                "pinned": lambda rep: _engine_run(pinned, tokens, depth, rep),
            }
            if llama_bench is not None:
                for t in range(1, most + 1):
                    fixed = replace(options, n_threads=t)
                    arms[f"llama-bench -t {t}"] = _llama_bench_arm(
                        llama_bench, fixed, depth, tokens, in_memory
                    )
            with spinning(busy):
                runs = interleaved(arms, reps)
            lines += _rows(name, runs, most)
        lines += timeline(engine, max(tokens * 4, 400), 1.0, 4.0, cores)
    finally:
        engine.close()
        pinned.close()
    return lines


def _llama_bench_arm(exe: Path, options: LoadOptions, depth: int, tokens: int, in_memory: bool):
    """llama-bench at options' fixed thread count, as an arm of the rounds (no switches)."""

    def arm(_rep: int) -> tuple[Run, tuple]:
        return llama_bench_run(exe, options, depth, tokens, "engine", in_memory=in_memory), ()

    return arm


def _rows(name: str, runs: dict[str, list[tuple[Run, tuple]]], most: int) -> list[str]:
    """One load's lines: medians of the engine's runs, and per-round ratios' medians (each
    round ran every arm once, in turn)."""
    following = [r for r, _ in runs["following"]]
    pinned = [r for r, _ in runs["pinned"]]
    changed = sum(len(s) for _, s in runs["following"])
    dec = median([r.decode_tps for r in following])
    pre = median([r.prefill_tps for r in following])
    out = [f"{name}: engine decode {dec:.1f} t/s, prefill {pre:.1f} t/s ({changed} switches)"]
    out.append(
        f"  engine pinned at {most} threads: decode "
        f"{median([r.decode_tps for r in pinned]):.1f}, prefill "
        f"{median([r.prefill_tps for r in pinned]):.1f} (following / pinned: decode "
        f"{_ratio(following, pinned, 'decode_tps'):.3f}x, prefill "
        f"{_ratio(following, pinned, 'prefill_tps'):.3f}x)"
    )
    fixed = {arm: [r for r, _ in rs] for arm, rs in runs.items() if arm.startswith("llama-bench")}
    if fixed:
        for arm, rs in fixed.items():
            out.append(
                f"  {arm}: decode {median([r.decode_tps for r in rs]):.1f}, "
                f"prefill {median([r.prefill_tps for r in rs]):.1f}"
            )
        rounds = list(zip(*fixed.values(), strict=True))
        best_dec = [max(r.decode_tps for r in rnd) for rnd in rounds]
        best_pre = [max(r.prefill_tps for r in rnd) for rnd in rounds]
        out.append(
            "  engine / best fixed (per round): decode "
            f"{median([r.decode_tps / b for r, b in zip(following, best_dec, strict=True)]):.3f}x, "
            f"prefill "
            f"{median([r.prefill_tps / b for r, b in zip(following, best_pre, strict=True)]):.3f}x"
        )
    return out


def _ratio(a: list[Run], b: list[Run], field: str) -> float:
    """The median of the rounds' ratios a / b of one speed."""
    return median([getattr(x, field) / getattr(y, field) for x, y in zip(a, b, strict=True)])


def print_busy_bench(
    options: LoadOptions, tokens: int, depth: int, reps: int, llama_bench: Path | None
) -> int:
    for line in busy_report(options, tokens, depth, reps, llama_bench):
        print(line, flush=True)
    return 0
