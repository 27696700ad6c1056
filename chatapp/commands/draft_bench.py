"""`chatapp bench --draft`: speculative decoding against the same engine without it, alternating."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from chatapp.engine.protocol import ChatMessage, GenerateRequest, LoadOptions
from chatapp.metrics import GenerationStats, median
from chatapp.models.compare import reply_ids
from chatapp.sampling import SamplerSettings

GREEDY = SamplerSettings(temperature=0.0, repeat_penalty=1.0)

# About 300 words of plain prose for the rewrite task: the reply repeats it with small edits,
# so most of it can be drafted from the prompt.
PASSAGE = (
    "The old lighthouse stood at the end of a narrow spit of rock, and for ninety years it had "
    "kept the same slow rhythm: a long flash, a short dark, a long flash again. The keeper who "
    "lived there in the last years before the lamp was automated was a quiet man named Thomas "
    "Hale. He rose before dawn, climbed the hundred and twelve steps to the lantern room, "
    "cleaned the great lens with a soft cloth and a little vinegar, and wrote the weather in a "
    "leather book. In the afternoons he mended nets for the fishermen in the village, who paid "
    "him in bread, in eggs, and sometimes in news from the mainland. In winter the storms came "
    "in from the west, and the whole tower hummed like a struck bell. On those nights Thomas did "
    "not sleep at all. He sat beside the lamp with a pot of tea and listened to the wind, and "
    "when a ship passed close to the reef he watched its lights until they were safely past. "
    "One morning in early spring he found a green glass bottle wedged between two rocks below "
    "the tower. Inside was a letter written in careful blue ink. It was from a girl on an island "
    "far to the south, who said that she had thrown twelve bottles into the sea and wanted to "
    "know how far the water could carry a question. Her question was simple: what do you see "
    "from your window? Thomas read the letter three times. Then he sat at the kitchen table and "
    "began to write an answer, describing the rocks, the birds, the changing colour of the water "
    "and the lamp that turned above him every night of the year. When he had finished, he "
    "sealed the letter in the same green bottle and carried it down to the shore at low tide."
)
# Edit tasks on texts that were not written for this benchmark: a passage of the Apache
# License 2.0 (section 4, as published), ordinary code, and a list.
LICENCE = (
    "You may reproduce and distribute copies of the Work or Derivative Works thereof in any "
    "medium, with or without modifications, and in Source or Object form, provided that You "
    "meet the following conditions: You must give any other recipients of the Work or "
    "Derivative Works a copy of this License; and You must cause any modified files to carry "
    "prominent notices stating that You changed the files; and You must retain, in the Source "
    "form of any Derivative Works that You distribute, all copyright, patent, trademark, and "
    "attribution notices from the Source form of the Work, excluding those notices that do not "
    "pertain to any part of the Derivative Works."
)
CODE = """def load_settings(path):
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def merge_settings(defaults, settings):
    merged = dict(defaults)
    for key, value in settings.items():
        if value:
            merged[key] = value
    return merged
"""
SHOPPING = (
    "- two loaves of brown bread\n- a dozen free-range eggs\n- one litre of whole milk\n"
    "- a bag of green apples\n- fresh basil and parsley\n- three tins of chopped tomatoes\n"
    "- a block of cheddar cheese\n- washing-up liquid\n- a packet of black tea\n"
    "- two kilos of potatoes"
)
TASKS = {
    "rewrite": (
        "Rewrite the following text, changing the keeper's name from Thomas Hale to Peter Grey. "
        "Keep every other word the same.\n\n" + PASSAGE
    ),
    "licence edit": (
        "Repeat the following text exactly, but write 'the recipient' instead of 'You' "
        "throughout.\n\n" + LICENCE
    ),
    "code rename": (
        "Rename the variable `settings` to `options` in this Python code and print the whole "
        "code again, changing nothing else.\n\n" + CODE
    ),
    "list reorder": (
        "Sort this shopping list alphabetically and print it again as a list.\n\n" + SHOPPING
    ),
    "free-form": "Write a long story about a fox who learns to sail a small boat.",
}
REWRITES = ("rewrite", "licence edit", "code rename", "list reorder")


@dataclass
class Side:
    decode_tps: float
    ids: tuple[int, ...]
    stats: GenerationStats


def _reply(engine, task: str, draft: str, tokens: int) -> Side:
    req = GenerateRequest(
        (ChatMessage("user", TASKS[task]),),
        GREEDY.with_(max_tokens=tokens),
        top_n=10,  # as the chat runs: the candidate view is part of every step
        draft=draft,
    )
    ids, end = reply_ids(engine, req)
    if end is None:
        raise RuntimeError("the engine did not finish the benchmark reply")
    return Side(end.stats.decode_tps or 0.0, tuple(ids), end.stats)


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first token where two replies differ (None when they are the same)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def task_report(pairs: list[tuple[Side, Side]]) -> dict:
    """One task's line of the report from its (plain, drafted) pairs: medians, the last
    drafted reply's counts, and where the outputs first parted in the first pair that did."""
    last_spec = pairs[-1][1]
    return {
        "speedup": median([s.decode_tps / p.decode_tps for p, s in pairs]),
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


def run_draft_bench(options: LoadOptions, draft: str, tokens: int, reps: int) -> dict:
    """Per task, `reps` pairs of replies (plain, then with drafts) on one engine, greedy."""
    from chatapp.engine.factory import make_engine

    report: dict = {"model": options.model_path, "draft": draft, "tokens": tokens, "tasks": {}}
    with make_engine(options) as engine:
        report["draft_model"] = engine.info.draft_model if engine.info else ""
        for task in TASKS:
            _reply(engine, task, "", 16)  # warm-up: caches, the template
            pairs = []
            for rep in range(reps):
                plain = _reply(engine, task, "", tokens)
                spec = _reply(engine, task, draft, tokens)
                pairs.append((plain, spec))
                print(
                    f"{task} rep {rep + 1}/{reps}: plain {plain.decode_tps:.1f} t/s, "
                    f"{draft} {spec.decode_tps:.1f} t/s "
                    f"(accepted {spec.stats.draft_accepted}/{spec.stats.draft_tokens})",
                    file=sys.stderr,
                )
            report["tasks"][task] = task_report(pairs)
    return report


def print_draft_bench(options: LoadOptions, draft: str, tokens: int, reps: int, as_json: bool):
    report = run_draft_bench(options, draft, tokens, reps)
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"speculative decoding ({draft}) vs one token at a time: greedy, {tokens} tokens, "
          f"median of {reps} alternating pairs")  # fmt: skip
    for task, r in report["tasks"].items():
        same = (
            "same output"
            if r["same_output"]
            else f"output differs from token {r['first_difference']}"
        )
        print(
            f"  {task:<10} {r['speedup']:.2f}x  ({r['draft_decode_tps']:.1f} vs "
            f"{r['plain_decode_tps']:.1f} t/s)  accepted {r['acceptance']:.0%} of drafts, "
            f"{r['mean_accepted']:.1f} per batch; {same}"
        )
    return 0
