"""`chatapp bench --alternatives N`: N replies in one batch against one reply, alternating."""

from __future__ import annotations

import json
import sys

from chatapp.engine.protocol import ChatMessage, GenerateRequest, LoadOptions
from chatapp.metrics import median
from chatapp.models.compare import reply_ids
from chatapp.sampling import SamplerSettings

PROMPT = (ChatMessage("user", "Write a long story about a fox who learns to sail a small boat."),)


def _aggregate_tps(engine, n: int, tokens: int) -> float:
    """Tokens of all n replies per second of decoding (first token to last, wall time)."""
    req = GenerateRequest(
        PROMPT,
        SamplerSettings(temperature=0.8, max_tokens=tokens),
        n_alternatives=n,
        ignore_eos=True,  # every reply runs its full length: the same work each time
    )
    ids, end = reply_ids(engine, req)
    if end is None or end.stats.decode_s <= 0:
        raise RuntimeError("the engine did not finish the benchmark reply")
    return (len(ids) - 1) / end.stats.decode_s


def run_batch_bench(options: LoadOptions, n: int, tokens: int, reps: int) -> dict:
    from chatapp.engine.local.process.local_engine import LocalEngine

    pairs = []
    with LocalEngine(options) as engine:
        _aggregate_tps(engine, n, 8)  # warm-up
        for rep in range(reps):
            one = _aggregate_tps(engine, 1, tokens)
            many = _aggregate_tps(engine, n, tokens)
            pairs.append((one, many))
            print(f"rep {rep + 1}/{reps}: 1 reply {one:.1f} t/s, {n} replies {many:.1f} t/s",
                  file=sys.stderr)  # fmt: skip
    return {
        "alternatives": n,
        "tokens": tokens,
        "reps": reps,
        "one_reply_tps": median([p[0] for p in pairs]),
        "aggregate_tps": median([p[1] for p in pairs]),
        "aggregate_over_one": median([m / o for o, m in pairs]),
    }


def print_batch_bench(options: LoadOptions, n: int, tokens: int, reps: int, as_json: bool) -> int:
    r = run_batch_bench(options, n, tokens, reps)
    if as_json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"{n} replies in one batch vs one reply: {tokens} tokens each, median of {reps} pairs")
    print(f"  aggregate {r['aggregate_tps']:.1f} t/s vs {r['one_reply_tps']:.1f} t/s: "
          f"{r['aggregate_over_one']:.2f}x")  # fmt: skip
    return 0
