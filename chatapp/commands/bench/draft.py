"""`chatapp bench --draft`: speculative decoding against the same engine without it, and
llama-server's plain decode and n-gram modes on the same greedy chats and kernels, interleaved."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chatapp.commands.bench.draft_tasks import HELD_OUT, DraftTask
from chatapp.commands.bench.run import turns
from chatapp.commands.bench.server import TOP_N
from chatapp.engine.protocol import ChatMessage, GenerateRequest, LoadOptions
from chatapp.metrics import GenerationStats, median
from chatapp.models.compare import reply_ids
from chatapp.sampling import SamplerSettings, server_fields

GREEDY = SamplerSettings(temperature=0.0, repeat_penalty=1.0)
# llama-server's arms: its plain decode, then each of its n-gram modes on its own defaults
SERVER_MODES = ("none", "ngram-simple", "ngram-map-k", "ngram-mod")


@dataclass
class Side:
    decode_tps: float
    ids: tuple[int, ...]
    stats: GenerationStats


@dataclass
class ServerRun:
    decode_tps: float
    text: str
    drafted: int
    accepted: int


def _request(task: DraftTask, draft: str, tokens: int) -> GenerateRequest:
    return GenerateRequest(
        (ChatMessage("user", task.prompt),),
        GREEDY.with_(max_tokens=tokens),
        top_n=TOP_N,  # as the chat runs: the candidate view is part of every step
        draft=draft,
    )


def _reply(engine, task: DraftTask, draft: str, tokens: int) -> Side:
    ids, end = reply_ids(engine, _request(task, draft, tokens))
    if end is None:
        raise RuntimeError("the engine did not finish the benchmark reply")
    return Side(end.stats.decode_tps or 0.0, tuple(ids), end.stats)


def _server_reply(server, prompt: str, tokens: int, timed: bool = True) -> ServerRun:
    """One greedy completion of the chat's rendered prompt by llama-server, its own timings
    (none asked of an untimed one: a one-token reply has no decode to time)."""
    import httpx

    from chatapp.commands.bench.reference_tools import ToolError, log_last_line
    from chatapp.jsonfile import JsonFileError, parse

    body = {
        "prompt": prompt, "n_predict": tokens, "cache_prompt": False, "stream": False,
        "n_probs": TOP_N,  # (the engine's arms report the top 10 of every token too)
        **server_fields(GREEDY, "llama-server", leave_out=("max_tokens",)),
    }  # fmt: skip
    try:
        r = httpx.post(f"{server.url}/completion", json=body, timeout=600)
        r.raise_for_status()
        data = parse(r.text, where="llama-server's reply")
    except (httpx.HTTPError, JsonFileError) as exc:
        raise ToolError(
            f"llama-server's /completion failed ({exc}); the last line it printed: "
            f"{log_last_line(server.log_path)}"
        ) from exc
    if not timed:
        return ServerRun(0.0, "", 0, 0)
    t = data.get("timings") if isinstance(data, dict) else None
    if not isinstance(t, dict) or not t.get("predicted_per_second"):
        raise ToolError(
            "llama-server sent no timings with its reply; the last line it printed: "
            f"{log_last_line(server.log_path)}"
        )
    return ServerRun(
        float(t["predicted_per_second"]),
        str(data.get("content", "")),
        int(t.get("draft_n") or 0),
        int(t.get("draft_n_accepted") or 0),
    )


def _warm(server, prompt: str) -> None:
    """One token of the prompt, untimed: the weights paged in, the compute graph made."""
    _server_reply(server, prompt, 1, timed=False)


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first token where two replies differ (None when they are the same)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def spread(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def task_report(pairs: list[tuple[Side, Side]]) -> dict:
    """One task's chatapp line from its (plain, drafted) pairs: medians and spread, the last
    drafted reply's counts, and where the outputs first parted in the first pair that did."""
    last_spec = pairs[-1][1]
    ratios = [s.decode_tps / p.decode_tps for p, s in pairs]
    return {
        "speedup": median(ratios),
        "spread": spread(ratios),
        "plain_decode_tps": median([p.decode_tps for p, _ in pairs]),
        "draft_decode_tps": median([s.decode_tps for _, s in pairs]),
        "acceptance": median([s.stats.acceptance or 0.0 for _, s in pairs]),
        "mean_accepted": median([s.stats.mean_accepted or 0.0 for _, s in pairs]),
        "drafted": last_spec.stats.draft_tokens,
        "accepted": last_spec.stats.draft_accepted,
        "tokens": len(last_spec.ids),
        "same_output": all(p.ids == s.ids for p, s in pairs),
        "first_difference": next(
            (i for p, s in pairs if (i := first_difference(p.ids, s.ids)) is not None), None
        ),
    }


def server_report(runs: dict[str, list[ServerRun]], drafted: list[Side]) -> dict:
    """llama-server's modes against its plain decode (medians of per-repetition ratios), and
    chatapp's drafted decode against the best of its n-gram modes on this task."""
    plain = runs["none"]
    modes: dict[str, dict[str, Any]] = {}
    for mode, rs in runs.items():
        if mode == "none":
            continue
        ratios = [r.decode_tps / p.decode_tps for r, p in zip(rs, plain, strict=True)]
        modes[mode] = {
            "speedup": median(ratios),
            "spread": spread(ratios),
            "decode_tps": median([r.decode_tps for r in rs]),
            "accepted": f"{rs[-1].accepted}/{rs[-1].drafted}",
            # drafted replies can part from the plain one at a near-tie (batched matmuls round
            # otherwise), and a reply that then loops is drafted far more: other work
            "same_as_plain": all(r.text == p.text for r, p in zip(rs, plain, strict=True)),
        }
    best = max(modes, key=lambda m: modes[m]["decode_tps"])
    lead = [s.decode_tps / r.decode_tps for s, r in zip(drafted, runs[best], strict=True)]
    return {
        "plain_decode_tps": median([p.decode_tps for p in plain]),
        "modes": modes,
        "best_mode": best,
        "lead": median(lead),
        "lead_spread": spread(lead),
    }


class ServerArm:
    """One llama-server mode as a bench arm. The n-gram modes keep their tables between requests
    (ngram-mod's pool, ngram-map-k's key map), so a prompt sent again is drafted from the reply
    it got before (measured: ngram-mod drafted nothing on the code task's first request, then
    116 of 128 accepted on the same request repeated). Each of their measured replies therefore
    gets a fresh server, warmed with one token of the same prompt: a task seen once, as the
    engine's drafter sees it. The plain decode keeps one server."""

    def __init__(
        self, exe: Path, options: LoadOptions, logs: str, mode: str, stack, exact: bool
    ) -> None:
        fa = "on" if options.flash_attn else "off" if options.flash_attn is False else "auto"
        kernels = ("-fa", "on", "-ctk", "q8_0") if exact else ("-fa", fa)
        self.exe, self.options, self.mode = exe, options, mode
        self.extra = ("--spec-type", mode, *kernels)
        self.log = f"{logs}/{mode}.log"
        self.kept = None if mode != "none" else stack.enter_context(self._server())

    def _server(self):
        from chatapp.commands.bench.server import LlamaServer

        return LlamaServer(self.exe, self.options, self.log, extra=self.extra)

    def reply(self, prompt: str, tokens: int) -> ServerRun:
        if self.kept is not None:
            return _server_reply(self.kept, prompt, tokens)
        with self._server() as server:
            _warm(server, prompt)
            return _server_reply(server, prompt, tokens)


def _servers(
    exe: Path | None, options: LoadOptions, logs: str, stack, exact: bool
) -> dict[str, ServerArm]:
    """llama-server's arms, on the engine's kernels: where the engine's batches are exact,
    flash attention over a Q8_0 K cache (llama_open.make_exact), so its drafted replies are
    its plain ones and the engine's, and every arm writes the same text; else its defaults."""
    if exe is None:
        return {}
    return {mode: ServerArm(exe, options, logs, mode, stack, exact) for mode in SERVER_MODES}


def run_draft_bench(
    options: LoadOptions,
    draft: str,
    reps: int,
    tasks: tuple[DraftTask, ...] = HELD_OUT,
    llama_server: Path | None = None,
) -> dict:
    """Per task, `reps` rounds of every arm (chatapp plain and drafted, and llama-server's
    modes when given), the arms' order turning each round; greedy, one engine. Exact batches
    left open are on from the start: a reply with drafts turns them on for every reply after
    it, so both arms run on the kernels a user who drafts has."""
    from contextlib import ExitStack
    from dataclasses import replace

    from chatapp.engine.factory import make_engine

    if options.exact_batches is None:
        options = replace(options, exact_batches=True)
    report: dict = {"model": options.model_path, "draft": draft, "reps": reps, "tasks": {}}
    with ExitStack() as stack:
        logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="draft-bench-"))
        engine: Any = make_engine(options)  # (a LocalEngine: a context manager)
        stack.enter_context(engine)
        exact = bool(engine.info and engine.info.exact_batches)
        servers = _servers(llama_server, options, logs, stack, exact)
        report["draft_model"] = engine.info.draft_model if engine.info else ""
        report["exact_batches"] = exact
        for task in tasks:
            report["tasks"][task.name] = _run_task(engine, servers, task, draft, reps)
    return report


def _run_task(
    engine, servers: dict[str, ServerArm], task: DraftTask, draft: str, reps: int
) -> dict:
    prompt, _ = engine.render_prompt(_request(task, "", task.tokens))
    arms = ["plain", "draft", *servers]
    _reply(engine, task, "", 16)  # warm-up: caches, the template
    sides: dict[str, list[Side]] = {"plain": [], "draft": []}
    runs: dict[str, list[ServerRun]] = {mode: [] for mode in servers}
    for rep, order in turns(arms, reps):
        for arm in order:
            if arm in servers:
                runs[arm].append(servers[arm].reply(prompt, task.tokens))
            else:
                kind = draft if arm == "draft" else ""
                sides[arm].append(_reply(engine, task, kind, task.tokens))
        plain, spec = sides["plain"][-1], sides["draft"][-1]
        line = " ".join(f"{m} {rs[-1].decode_tps:.1f}" for m, rs in runs.items())
        print(
            f"{task.name} rep {rep + 1}/{reps}: plain {plain.decode_tps:.1f} t/s, {draft} "
            f"{spec.decode_tps:.1f} t/s (accepted {spec.stats.draft_accepted}/"
            f"{spec.stats.draft_tokens}){'; llama-server ' + line if line else ''}",
            file=sys.stderr,
        )
    pairs = list(zip(sides["plain"], sides["draft"], strict=True))
    result = {"edit": task.edit, "chatapp": task_report(pairs)}
    if servers:
        server = result["llama-server"] = server_report(runs, sides["draft"])
        server["same_text_as_chatapp"] = _same_text(engine, pairs[-1][0], runs["none"][-1].text)
    return result


def _same_text(engine, side: Side, text: str) -> bool:
    """Whether llama-server's plain reply is chatapp's plain reply (the same greedy chat)."""
    ids = [t.id for t in engine.tokenize(text, special=False)] if text else []
    return tuple(ids) == side.ids[: len(ids)] and len(ids) >= len(side.ids) - 1


def print_draft_bench(
    options: LoadOptions,
    draft: str,
    reps: int,
    as_json: bool,
    llama_server: Path | None = None,
    tokens: int | None = None,
) -> int:
    """`tokens`: each task's reply at most this long (None: each task's own length)."""
    tasks = HELD_OUT if tokens is None else tuple(replace(t, tokens=tokens) for t in HELD_OUT)
    report = run_draft_bench(options, draft, reps, tasks, llama_server=llama_server)
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    exact = (
        "exact batches (llama-server's too: flash attention over a Q8_0 K cache)"
        if report["exact_batches"]
        else "batches not exact here"
    )
    print(f"speculative decoding ({draft}) vs one token at a time on held-out tasks: greedy, "
          f"{exact}, medians of {reps} interleaved rounds [spread]")  # fmt: skip
    for name, r in report["tasks"].items():
        print("  " + task_line(name, r))
    return 0


def task_line(name: str, r: dict) -> str:
    c = r["chatapp"]
    same = (
        "same output" if c["same_output"] else f"output differs from token {c['first_difference']}"
    )
    line = (
        f"{name:<16} {c['speedup']:.2f}x [{c['spread'][0]:.2f}-{c['spread'][1]:.2f}] "
        f"({c['draft_decode_tps']:.1f} vs {c['plain_decode_tps']:.1f} t/s, {c['tokens']} tokens) "
        f"accepted {c['acceptance']:.0%}, {c['mean_accepted']:.1f} per batch; {same}"
    )
    s = r.get("llama-server")
    if s:
        modes = ", ".join(
            f"{m} {v['speedup']:.2f}x{'' if v.get('same_as_plain', True) else '*'}"
            for m, v in s["modes"].items()
        )
        line += (
            f"\n{'':18} llama-server {s['plain_decode_tps']:.1f} t/s plain; {modes}; "
            f"chatapp drafted / {s['best_mode']}: {s['lead']:.2f}x "
            f"[{s['lead_spread'][0]:.2f}-{s['lead_spread'][1]:.2f}]"
        )
        if not s.get("same_text_as_chatapp", True):
            line += " (llama-server's greedy reply is another text here: other work)"
        if any(not v.get("same_as_plain", True) for v in s["modes"].values()):
            line += f"\n{'':18} * its drafted reply is not its plain one (it parted at a near-tie)"
    return line
