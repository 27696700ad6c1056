"""`chatapp bench`: engine speed vs llama-cpp-python streaming and llama-bench, alternating."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from chatapp import paths
from chatapp.commands.bench.llama_bench_tool import LLAMA_BENCH_VARIANTS, llama_bench_run
from chatapp.commands.bench.reference_tools import check_tool
from chatapp.commands.bench.run import Run
from chatapp.cpu_load import OtherPrograms, disturbed
from chatapp.engine.local.load import huge_pages
from chatapp.engine.protocol import Finished, GenerateRequest, LoadOptions
from chatapp.metrics import median
from chatapp.sampling import PRESETS, by_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from llama_cpp import Llama
    from llama_cpp.llama_types import CreateCompletionStreamResponse

    from chatapp.engine.local.load.loaded_model import LoadedModel

BENCH_SETTINGS = PRESETS["balanced"]
TEXT = (
    "The history of the lighthouse is the history of people who lived at the edge of the "
    "sea and wanted to come home. Long before electric lamps, fires burned on hills above "
    "harbours, and sailors learned to read the coast by night as others read a book. "
)


def _prompt_ids(engine, n: int, rep: int) -> tuple[int, ...]:
    """n prompt tokens, rotated per repetition so no run reuses another's KV cache."""
    ids = [p.id for p in engine.tokenize(TEXT * (1 + n // 40), special=False)]
    start = (rep * 7) % 40
    return tuple(ids[start : start + n])


def engine_run(engine, prompt: tuple[int, ...], n: int) -> Run:
    req = GenerateRequest(
        messages=(),
        settings=BENCH_SETTINGS.with_(max_tokens=n),
        prompt_ids=prompt,
        ignore_eos=True,
        top_n=10,
        fresh_cache=True,  # the whole prompt each run, as llama-bench's pp
    )
    end = None
    for event in engine.generate(req):
        if isinstance(event, Finished):
            end = event
    if end is None:
        raise RuntimeError("the engine did not finish the benchmark run")
    st = end.stats
    return Run(st.prefill_tps or 0.0, st.decode_tps or 0.0, st.completion_tokens)


# ---- llama-cpp-python's own streaming API, in its own process --------------------------

# Each pool's process holds its model here (its initializer loads it).
_LLAMA: Llama | None = None
_BARE: LoadedModel | None = None


def _lcp_init(options: LoadOptions, log_path: str) -> None:
    global _LLAMA
    from chatapp.engine.local.load.llama_open import open_llama
    from chatapp.engine.local.process.worker import redirect_output

    redirect_output(log_path)

    _LLAMA = open_llama(options, verbose=False)


# ---- the floor: llama_decode one token at a time, nothing sampled, from Python ----------


def _bare_init(options: LoadOptions, log_path: str) -> None:
    global _BARE
    from chatapp.engine.local.load.loaded_model import LoadedModel
    from chatapp.engine.local.process.worker import redirect_output

    redirect_output(log_path)

    _BARE = LoadedModel(options)


def _bare_run(prompt: tuple[int, ...], n: int) -> Run:
    w = _BARE
    if w is None:
        raise RuntimeError("the bare loop runs in a pool that _bare_init started")
    w.reuse_prefix([-1])  # nothing in common: a fresh cache
    sync = w.lib.llama_synchronize  # llama_decode may return before a GPU has finished
    t0 = time.perf_counter()
    if w.decode(list(prompt[:-1])) or w.decode_one(prompt[-1]):
        raise RuntimeError("llama_decode failed in the bare loop")
    sync(w.ctx)
    times = [time.perf_counter()]
    for i in range(n - 1):
        # the same positions as a reply of n tokens
        if w.decode_one(prompt[i % len(prompt)]):
            raise RuntimeError("llama_decode failed in the bare loop")
        sync(w.ctx)
        times.append(time.perf_counter())
    decode = (len(times) - 1) / (times[-1] - times[0])
    return Run(len(prompt) / (times[0] - t0), decode, n)


def _lcp_run(prompt: tuple[int, ...], n: int) -> Run:
    if _LLAMA is None:
        raise RuntimeError("llama-cpp-python runs in a pool that _lcp_init started")
    t0 = time.perf_counter()
    times = []
    chunks = _LLAMA.create_completion(
        list(prompt),
        max_tokens=n,
        stream=True,
        # (the window is the Llama's own: last_n_tokens_size, 64 as the settings')
        **by_name(BENCH_SETTINGS, leave_out=("max_tokens", "repeat_last_n")),
    )
    # stream=True gives an iterator of chunks (llama_cpp's annotation does not tell the cases)
    for chunk in cast("Iterator[CreateCompletionStreamResponse]", chunks):
        if chunk["choices"][0]["finish_reason"] is None:  # the last chunk only says why it ended
            times.append(time.perf_counter())
    decode = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return Run(len(prompt) / (times[0] - t0), decode, len(times))


def best_of(*sides: list[Run]) -> list[Run]:
    """The runs of the best configuration: for decode the side with the highest median decode,
    for prefill likewise (each may be a different configuration). Not the faster side per
    repetition: on a noisy machine the larger of two samples of nearly equally fast
    configurations is biased upwards, a speed no configuration runs at (AMD EPYC, depth 1024:
    engine / per-repetition best 0.924x, engine / the faster configuration 0.943x)."""
    decode = max(sides, key=lambda runs: median(r.decode_tps for r in runs))
    prefill = max(sides, key=lambda runs: median(r.prefill_tps for r in runs))
    return [
        Run(p.prefill_tps, d.decode_tps, d.tokens, d.crashed)
        for d, p in zip(decode, prefill, strict=True)
    ]


# ---- the whole benchmark ---------------------------------------------------------------

# llama.cpp attends over the used KV cells rounded up to a multiple of 256, or over the whole
# cache when that is smaller (llama_kv_cache::get_n_kv). llama-bench's context is exactly
# depth + tokens, so at tg128 after 1024 tokens it attends 1152 cells where any larger context
# (a chat's 4096) attends 1280: ~2% less work for the same tokens (bare loops, 5 pairs: 1152
# cells 1.001x llama-bench, 1280 cells 0.981x). Comparisons with llama-bench therefore end the
# run on a multiple of this.
KV_PAD = 256


def aligned_tokens(prompt_tokens: int, tokens: int, n_ctx: int) -> int:
    """The fewest tokens >= `tokens` after which prompt + reply fill a whole number of KV_PAD
    blocks, so llama-bench attends over as many cells as the engine at every step; `tokens`
    itself where that end would not fit the engine's context of `n_ctx`."""
    end = -(-(prompt_tokens + tokens) // KV_PAD) * KV_PAD
    return end - prompt_tokens if end <= n_ctx else tokens


def run_bench(
    options: LoadOptions,
    *,
    tokens: int,
    prompt_tokens: int,
    reps: int,
    llama_bench: Path | None,
    as_json: bool,
    llama_server: Path | None = None,
) -> int:
    from chatapp.engine.local.process.local_engine import LocalEngine

    check_tool("llama-bench", llama_bench)
    check_tool("llama-server", llama_server)
    asked = tokens
    if llama_bench is not None:
        tokens = _aligned(prompt_tokens, tokens, options.n_ctx, as_json)
    results: dict[str, list[Run]] = {"engine": [], "llama-cpp-python": [], "bare decode": []}
    busy: list[float | None] = []
    if llama_bench:
        results.update({name: [] for name in LLAMA_BENCH_VARIANTS})
    if llama_server:
        results["llama-server"] = []
    with contextlib.closing(LocalEngine(options)) as engine:
        info = engine.start()
        # every contender runs what the engine chose here (tuned, or the CPU's defaults)
        options = replace(
            options,
            n_threads=info.n_threads,
            flash_attn=info.flash_attn,
            repack=info.repack,
            huge_pages=info.huge_pages,
        )
        with contextlib.ExitStack() as pools:
            sides = _sides(pools, engine, options, info.huge_pages, llama_server)
            asked_for = (tokens, prompt_tokens, reps, llama_bench, as_json, info.weights_in_memory)
            _alternate(sides, options, results, *asked_for, busy)
    if llama_bench:
        results["best llama-bench"] = best_of(
            results["llama-bench fa0"], results["llama-bench fa1"], results["llama-bench as engine"]
        )
    report = summarize(results, options, tokens, prompt_tokens, reps)
    report["tokens_asked"] = asked
    report["busy_cores"] = [None if b is None else round(b, 2) for b in busy]
    report["disturbed_reps"] = [i + 1 for i, b in enumerate(busy) if disturbed(b, options.threads)]
    report["weights_in_memory"] = info.weights_in_memory
    print(json.dumps(report, indent=2) if as_json else format_report(report))
    return 0


def _aligned(prompt_tokens: int, tokens: int, n_ctx: int, as_json: bool) -> int:
    """aligned_tokens, and a line on stderr saying why when it is not the count asked."""
    aligned = aligned_tokens(prompt_tokens, tokens, n_ctx)
    if aligned != tokens and not as_json:
        print(
            f"tg{tokens} -> tg{aligned}: llama-bench's context is exactly depth + tokens, "
            f"and llama.cpp attends over fewer cells when that is not a multiple of "
            f"{KV_PAD}; ending on one compares the same work",
            file=sys.stderr,
        )
    return aligned


def _sides(pools, engine, options: LoadOptions, pages, llama_server: Path | None) -> dict:
    """The contenders, each in `pools` (closed with them): the engine, llama-cpp-python and
    the bare loop in processes of their own, and llama-server when given."""
    log = str(paths.log_dir() / "bench-llama-cpp-python.log")
    ctx = mp.get_context("spawn")
    # the references start with the pages the engine got
    with huge_pages.for_children(pages):
        pool = pools.enter_context(ctx.Pool(1, _lcp_init, (options, log)))
        bare = pools.enter_context(ctx.Pool(1, _bare_init, (options, log)))
    sides = {"engine": engine, "llama-cpp-python": pool, "bare decode": bare}
    if llama_server:
        from chatapp.commands.bench.server import LlamaServer

        server_log = str(paths.log_dir() / "bench-llama-server.log")
        sides["llama-server"] = pools.enter_context(LlamaServer(llama_server, options, server_log))
    return sides


def _alternate(
    sides: dict,
    options: LoadOptions,
    results: dict[str, list[Run]],
    tokens: int,
    prompt_tokens: int,
    reps: int,
    llama_bench: Path | None,
    as_json: bool,
    in_memory: bool = False,
    busy: list | None = None,
) -> None:
    """Each repetition runs every contender once, back to back, on its own prompt; `busy`
    gets the cores other programs used during each repetition."""
    busy = [] if busy is None else busy
    engine, pool, bare = sides["engine"], sides["llama-cpp-python"], sides["bare decode"]
    prompts = [_prompt_ids(engine, prompt_tokens, r) for r in range(reps + 1)]
    engine_run(engine, prompts[-1], 8)  # warm-up, every side
    pool.apply(_lcp_run, (prompts[-1], 8))
    bare.apply(_bare_run, (prompts[-1], 8))
    server = sides.get("llama-server")
    if server is not None:
        server.run(prompts[-1], 8, BENCH_SETTINGS)
    for rep in range(reps):
        others = OtherPrograms()  # this process and its children (every contender) left out
        results["engine"].append(engine_run(engine, prompts[rep], tokens))
        results["llama-cpp-python"].append(pool.apply(_lcp_run, (prompts[rep], tokens)))
        results["bare decode"].append(bare.apply(_bare_run, (prompts[rep], tokens)))
        if server is not None:
            results["llama-server"].append(server.run(prompts[rep], tokens, BENCH_SETTINGS))
        if llama_bench:
            for name, variant in LLAMA_BENCH_VARIANTS.items():
                results[name].append(
                    llama_bench_run(llama_bench, options, prompt_tokens, tokens, variant, in_memory)
                )
        busy.append(others())
        if not as_json:
            print(
                f"rep {rep + 1}/{reps}: "
                + "  ".join(
                    f"{name} {runs[-1].decode_tps:.1f} t/s" for name, runs in results.items()
                ),
                file=sys.stderr,
            )


def summarize(
    results: dict[str, list[Run]], options: LoadOptions, tokens: int, prompt_tokens: int, reps: int
) -> dict:
    med = {
        name: {
            "decode_tps": median([r.decode_tps for r in runs]),
            "prefill_tps": median([r.prefill_tps for r in runs]),
            "tokens": median([r.tokens for r in runs]),
            "crashed": next((r.crashed for r in runs if r.crashed), ""),
            "runs": [asdict(r) for r in runs],
        }
        for name, runs in results.items()
    }

    def paired(mine: list[Run], other: list[Run], field: str) -> float | None:
        # Median of per-repetition ratios: each pair ran back to back, so drift cancels.
        ratios = [
            getattr(e, field) / getattr(o, field)
            for e, o in zip(mine, other, strict=True)
            if getattr(o, field) and getattr(e, field)
        ]
        return median(ratios) if ratios else None

    pairs = [("engine", name) for name in results if name != "engine"]
    if "best llama-bench" in results:
        pairs.append(("best llama-bench", "llama.cpp default"))  # what choosing is worth
    if "bare decode" in results:
        pairs.append(("llama-cpp-python", "bare decode"))  # how close the reference is to the floor
    ratios = {
        f"{a}/{b}": {
            "decode": paired(results[a], results[b], "decode_tps"),
            "prefill": paired(results[a], results[b], "prefill_tps"),
        }
        for a, b in pairs
    }
    return {
        "model": options.model_path,
        "threads": options.threads,
        "n_gpu_layers": options.n_gpu_layers,
        "flash_attn": options.flash_attn,
        "repack": options.repack,
        "huge_pages": options.huge_pages,
        "depth": prompt_tokens,
        "tokens": tokens,
        "prompt_tokens": prompt_tokens,
        "reps": reps,
        "settings": BENCH_SETTINGS.to_dict(),
        "medians": med,
        "ratios": ratios,
    }


def format_report(report: dict) -> str:
    lines = [
        f"model {Path(report['model']).name}, {report['threads']} threads, flash attention "
        f"{_on(report['flash_attn'])}, repack {_on(report['repack'])}, huge pages "
        f"{_on(report['huge_pages'])}"
        f"{' (weights too)' if report.get('weights_in_memory') else ''}, "
        f"pp{report['prompt_tokens']} tg{report['tokens']} at depth {report['depth']}, "
        f"median of {report['reps']}",
        f"{'':<20}{'prefill t/s':>12}{'decode t/s':>12}",
    ]
    for name, m in report["medians"].items():
        if m.get("crashed"):
            lines.append(f"{name:<20}  crashed ({m['crashed']}) in at least one run: not compared")
            continue
        lines.append(f"{name:<20}{m['prefill_tps']:>12.1f}{m['decode_tps']:>12.1f}")
    lines.append("paired ratios (median of per-repetition ratios):")
    for name, r in report["ratios"].items():
        dec = "n/a" if r["decode"] is None else f"{r['decode']:.3f}x"
        pre = "n/a" if r["prefill"] is None else f"{r['prefill']:.3f}x"
        lines.append(f"{name:<32} decode {dec}  prefill {pre}")
    if report.get("disturbed_reps"):
        reps = ", ".join(map(str, report["disturbed_reps"]))
        most = max(b for b in report["busy_cores"] if b is not None)
        lines.append(
            f"! repetition {reps} ran while other programs used up to {most:.1f} cores: "
            "those figures are unsure; run again on a quiet machine"
        )
    return "\n".join(lines)


def _on(value: bool | None) -> str:
    return "auto" if value is None else "on" if value else "off"
