"""Saved comparisons (a JSON file each in the cache's compare/ folder) and the best trade-off."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from chatapp import paths
from chatapp.models.compare_format import to_json, to_markdown
from chatapp.models.compare_result import CompareResult, RunResult

DEFAULT_KLD_BUDGET = 0.05  # mean KLD (nats per token) a file may lose against the reference


def best_tradeoff(runs: Sequence[RunResult], budget: float) -> RunResult | None:
    """The smallest file whose mean KLD against the reference is within `budget` (ties: the
    lower KLD); None when no file that ran has a KLD within it. The reference counts (KLD 0)."""
    fits = [r for r in runs if not r.error and r.mean_kl is not None and r.mean_kl <= budget]
    return min(fits, key=lambda r: (r.size_bytes, r.mean_kl, r.name), default=None)


def tradeoff_line(result: CompareResult, budget: float) -> str:
    """One sentence naming the best trade-off of a comparison under a KLD budget."""
    if not any(r.mean_kl is not None and not r.is_reference for r in result.runs):
        return "best trade-off: no file has a KLD against the reference"
    best = best_tradeoff(result.runs, budget)
    if best is None:
        return f"best trade-off: no file is within a mean KLD of {budget:g}"
    what = "the reference itself: no smaller file is" if best.is_reference else "the smallest"
    return (
        f"★ best trade-off: {best.name} ({best.size_bytes / 2**20:.1f} MiB, mean KLD "
        f"{best.mean_kl:.4f}), {what} within a mean KLD of {budget:g}"
    )


@dataclass(frozen=True)
class SavedRun:
    """A comparison read back from its file."""

    path: Path
    result: CompareResult

    def title(self) -> str:
        """One line: when, which files, on which text, how long."""
        r = self.result
        when = r.created[:16].replace("T", " ")
        quants = ", ".join(x.quant or x.name for x in r.runs)
        text = f"on {Path(r.text_file).name} (ctx {r.text_ctx})" if r.text_file else "built-in text"
        return f"{when}  {len(r.runs)} files: {quants}  {text}  {r.wall_s:.0f} s"


def runs_folder() -> Path:
    """Where `compare` saves each run (the CLI and the F10 screen alike)."""
    return paths.cache_dir() / "compare"


def saved_runs(folder: Path | None = None) -> tuple[list[SavedRun], list[str]]:
    """The saved comparisons, newest first, and a one-line note per file that could not be
    read (skipped)."""
    folder = folder or runs_folder()
    runs: list[SavedRun] = []
    notes: list[str] = []
    for f in sorted(folder.glob("compare-*.json"), reverse=True):  # the names hold the time
        try:
            result = load_result(f)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            notes.append(f"skipped {f.name}: not a readable comparison ({reason})")
            continue
        runs.append(SavedRun(f, replace(result, saved_to=str(f))))
    return runs, notes


def export_markdown(result: CompareResult, folder: Path | None = None) -> Path:
    """Write the table, the setup and each reply as Markdown; returns the file."""
    folder = folder or runs_folder()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}.md"
    if result.text_file:
        scored = max((r.scored_tokens for r in result.runs), default=0)
        text = f"{scored} tokens of `{result.text_file}` scored in chunks of {result.text_ctx}"
    else:
        text = f"{result.text_tokens} text tokens scored"
    lines = [
        f"# Comparison of {len(result.runs)} files",
        "",
        f"Prompt: {result.prompt}  ",
        f"Reference: `{result.reference}`; {result.tokens} tokens generated greedily "
        f"(seed {result.seed}), {text}, {result.n_threads} threads, {result.wall_s:.1f} s in all.",
        "",
        to_markdown(result),
        "",
    ]
    lines += [f"- {r.name}: {r.error or r.note}" for r in result.runs if r.error or r.note]
    for r in result.runs:
        lines += ["", f"## {r.name} ({r.quant})", "", r.error or r.text or "(empty reply)"]
    target.write_text("\n".join(lines) + "\n")
    return target


def save_result(result: CompareResult) -> CompareResult:
    """Write a comparison as a new JSON file in runs_folder(); the copy returned names it."""
    folder = runs_folder()
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    target = folder / f"compare-{stamp}.json"
    saved = CompareResult(**{**result.__dict__, "saved_to": str(target)})
    target.write_text(to_json(saved))
    return saved


def load_result(path: str | Path) -> CompareResult:
    """Read a saved comparison back."""
    data = json.loads(Path(path).read_text())
    data["runs"] = tuple(RunResult(**r) for r in data["runs"])
    return CompareResult(**data)
