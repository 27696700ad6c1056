"""`chatapp bench --busy`: the engine's speed while programs of a load (spin, build, memory) take
some of the cores, against llama-bench at every fixed thread count under the same load, and when
the engine's thread count switched."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NamedTuple

from chatapp.commands.ask import started_engine
from chatapp.commands.bench.busy_text import row_lines, timeline_lines
from chatapp.commands.bench.llama_bench_tool import llama_bench_run
from chatapp.commands.bench.loads import running
from chatapp.commands.bench.run import Run, interleaved
from chatapp.commands.bench.speed import BENCH_SETTINGS, _prompt_ids
from chatapp.cpus import usable_cpus
from chatapp.engine.engine_errors import EngineError
from chatapp.engine.protocol import Failed, Finished, GenerateRequest, LoadOptions, Token
from chatapp.metrics import median

TIMELINE = (1.0, 4.0)  # the timeline's load starts and stops this long after the first token


class ArmRun(NamedTuple):
    """One arm's run of a round: its speeds, the thread switches it made (the engine's), and
    the prompt tokens it evaluated (None where the arm does not say)."""

    run: Run
    switches: tuple = ()
    evaluated: int | None = None


def loads(cores: int) -> list[tuple[str, int]]:
    """The rows to measure: quiet, one core taken, all but one taken (on more than 2 cores),
    every core taken (as `make -jN` does)."""
    out = [("quiet", 0), (f"1 of {cores} cores busy", 1)]
    if cores > 2:
        out.append((f"{cores - 1} of {cores} cores busy", cores - 1))
    if cores > 1:
        out.append((f"{cores} of {cores} cores busy", cores))
    return out


def _request(engine, tokens: int, depth: int, rep: int) -> GenerateRequest:
    """Repetition rep's prompt, evaluated whole every time (fresh_cache): a prefill speed is
    of the whole prompt, whatever ran before on this engine."""
    return GenerateRequest(
        messages=(),
        settings=BENCH_SETTINGS.with_(max_tokens=tokens),
        prompt_ids=_prompt_ids(engine, depth, rep),
        ignore_eos=True,
        top_n=10,
        fresh_cache=True,
    )


def _engine_run(engine, tokens: int, depth: int, rep: int) -> ArmRun:
    """One reply on repetition rep's own prompt: its speeds, switches and evaluated tokens."""
    st = _finished(engine.generate(_request(engine, tokens, depth, rep + 1))).stats
    run = Run(st.prefill_tps or 0.0, st.decode_tps or 0.0, st.completion_tokens)
    return ArmRun(run, tuple(st.thread_switches), st.prompt_evaluated)


def _finished(events: Iterable) -> Finished:
    """The reply's end; a reply that failed is an EngineError with the engine's sentence."""
    for event in events:
        if isinstance(event, Finished):
            return event
        if isinstance(event, Failed):
            raise EngineError(f"the benchmark's reply failed: {event.message}")
    raise EngineError("the engine ended the benchmark's reply without finishing it")


def timeline(engine, tokens: int, depth: int, kind: str, cores: int) -> dict:
    """One long reply; one program of the load starts TIMELINE[0] s after its first token and
    ends at TIMELINE[1]. Each thread change: when (s from the first token), to how many, why,
    and how long after the load started or stopped."""
    start_s, stop_s = TIMELINE
    times: dict[int, float] = {}
    t_first = started = stopped = None
    end = None
    with contextlib.ExitStack() as stack:
        load: contextlib.ExitStack | None = None
        for event in engine.generate(_request(engine, tokens, depth, 0)):
            now = time.perf_counter()
            if isinstance(event, Failed):
                raise EngineError(f"the timeline's reply failed: {event.message}")
            if isinstance(event, Token):
                times[event.index] = event.t
                t_first = t_first or event.t
            if t_first is not None and load is None and now - t_first >= start_s:
                load = stack.enter_context(contextlib.ExitStack())
                started = load.enter_context(running(kind, 1)).started
            if load is not None and stopped is None and now - (t_first or now) >= stop_s:
                load.close()
                stopped = time.perf_counter()
            if isinstance(event, Finished):
                end = event
    switches = []
    for index, threads, why in end.stats.thread_switches if end else ():
        t = times.get(index)
        if t is None or t_first is None:
            continue
        entry: dict[str, Any] = {"t_s": t - t_first, "token": index, "threads": threads, "why": why}
        if started is not None and t >= started and (stopped is None or t < stopped):
            entry["after_load_started_s"] = t - started
        elif stopped is not None and t >= stopped:
            entry["after_load_stopped_s"] = t - stopped
        switches.append(entry)
    return {
        "cores": cores,
        "start_s": start_s,
        "stop_s": stop_s,
        "tokens": tokens,
        "switches": switches,
    }


def busy_report(
    options: LoadOptions,
    tokens: int,
    depth: int,
    reps: int,
    llama_bench: Path | None,
    llama_server: Path | None = None,
    load: str = "spin",
    progress: Callable[[str], None] = lambda line: None,
) -> dict:
    """The comparison under each row of `load`, as a JSON-ready dict."""
    cores = usable_cpus()
    report: dict[str, Any] = {"load": load, "model": options.model_path, "cores": cores}
    report.update(tokens=tokens, depth=depth, reps=reps, rows=[])
    with contextlib.ExitStack() as stack:
        server = _server(llama_server, options, stack)  # (first: a server that fails, fails fast)
        engine = started_engine(options)
        stack.callback(engine.close)
        most = engine.info.n_threads if engine.info else options.threads
        pinned = started_engine(replace(options, n_threads=most))  # today's: the count fixed
        stack.callback(pinned.close)
        report["threads"] = most
        arms = _arms(engine, pinned, options, tokens, depth, llama_bench, server)
        for warm in arms.values():  # caches, the template, the first decode's costs
            warm(-1)
        for name, busy in loads(cores):
            with running(load, busy):
                runs = interleaved(arms, reps)
            row = _row(name, runs, most)
            row["busy_cores"] = busy
            report["rows"].append(row)
            for line in row_lines(row):
                progress(line)
        # a reply long enough to outlast the load's stop, as the context allows
        depth = min(depth, 64)
        long = max(min(max(tokens * 4, 400), options.n_ctx - depth), tokens)
        report["timeline"] = timeline(engine, long, depth, load, cores)
    return report


def _server(exe: Path | None, options: LoadOptions, stack: contextlib.ExitStack):
    """llama-server on its own defaults (its thread count too), stopped with the stack."""
    if exe is None:
        return None
    from chatapp import paths
    from chatapp.commands.bench.server import LlamaServer

    log = str(paths.log_dir() / "bench-llama-server.log")
    return stack.enter_context(LlamaServer(exe, options, log))


def _arms(engine, pinned, options, tokens, depth, llama_bench, server) -> dict:
    """The arms of every round: the following engine, the pinned one, llama-bench at each
    fixed count up to the engine's, llama-server (when started)."""
    arms: dict[str, Callable[[int], ArmRun]] = {
        "following": lambda rep: _engine_run(engine, 8 if rep < 0 else tokens, depth, rep),
        "pinned": lambda rep: _engine_run(pinned, 8 if rep < 0 else tokens, depth, rep),
    }  # (rep -1: the warm-up)
    most = engine.info.n_threads if engine.info else options.threads
    in_memory = bool(engine.info and engine.info.weights_in_memory)
    if llama_bench is not None:
        for t in range(1, most + 1):
            fixed = replace(options, n_threads=t)
            arms[f"llama-bench -t {t}"] = _llama_bench_arm(
                llama_bench, fixed, depth, tokens, in_memory
            )
    if server is not None:

        def served(rep: int) -> ArmRun:
            n = 8 if rep < 0 else tokens
            run = server.run(_prompt_ids(engine, depth, rep + 1), n, BENCH_SETTINGS)
            return ArmRun(run, (), depth)  # (cache_prompt off: the whole prompt each time)

        arms["llama-server"] = served
    return arms


def _llama_bench_arm(exe: Path, options: LoadOptions, depth: int, tokens: int, in_memory: bool):
    """llama-bench at options' fixed thread count, as an arm of the rounds (no switches); its
    warm-up (rep -1) is nothing: each run is a fresh process."""

    def arm(rep: int) -> ArmRun:
        if rep < 0:
            return ArmRun(Run(0.0, 0.0, 0))
        run = llama_bench_run(exe, options, depth, tokens, "engine", in_memory=in_memory)
        return ArmRun(run, (), depth)

    return arm


def _medians(runs: list[ArmRun]) -> dict:
    return {
        "decode_tps": median([a.run.decode_tps for a in runs]),
        "prefill_tps": median([a.run.prefill_tps for a in runs]),
        "runs": [
            {
                **asdict(a.run),
                "prompt_evaluated": a.evaluated,
                "switches": [list(s) for s in a.switches],
            }
            for a in runs
        ],
    }


def _row(name: str, runs: dict[str, list[ArmRun]], most: int) -> dict:
    """One row: every arm's medians, and per-round ratios' medians (each round ran every arm
    once, in turn)."""
    following = [a.run for a in runs["following"]]
    pinned = [a.run for a in runs["pinned"]]
    row: dict[str, Any] = {
        "name": name,
        "threads": most,
        "switches": sum(len(a.switches) for a in runs["following"]),
        "arms": {arm: _medians(rs) for arm, rs in runs.items()},
        "following_over_pinned": {
            "decode": _ratio(following, pinned, "decode_tps"),
            "prefill": _ratio(following, pinned, "prefill_tps"),
        },
        "following_over_best_fixed": None,
    }
    fixed = [[a.run for a in rs] for arm, rs in runs.items() if arm.startswith("llama-bench")]
    if fixed:
        rounds = list(zip(*fixed, strict=True))
        best = {
            f: [max(getattr(r, f) for r in rnd) for rnd in rounds]
            for f in ("decode_tps", "prefill_tps")
        }
        row["following_over_best_fixed"] = {
            f.split("_")[0]: _ratio(following, [Run(b, b, 0) for b in best[f]], f) for f in best
        }
    return row


def _ratio(a: list[Run], b: list[Run], field: str) -> float | None:
    """The median of the rounds' ratios a / b of one speed (None when no round has both)."""
    ratios = [
        getattr(x, field) / getattr(y, field)
        for x, y in zip(a, b, strict=True)
        if getattr(y, field)
    ]
    return median(ratios) if ratios else None


def print_busy_bench(
    options: LoadOptions,
    tokens: int,
    depth: int,
    reps: int,
    llama_bench: Path | None,
    llama_server: Path | None = None,
    load: str = "spin",
    as_json: bool = False,
) -> int:
    """Text on stdout row by row, or (--json) progress on stderr and one JSON object."""

    def say(line: str) -> None:
        print(line, file=sys.stderr if as_json else sys.stdout, flush=True)

    say(f"load: {load} ({', '.join(name for name, _ in loads(usable_cpus()))})")
    report = busy_report(options, tokens, depth, reps, llama_bench, llama_server, load, say)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for line in timeline_lines(report["timeline"], load):
            say(line)
    return 0
