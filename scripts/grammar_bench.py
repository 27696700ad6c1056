"""Decode speed with and without a grammar, on one worker, runs alternated (README figures).

    PYTHONPATH=. python scripts/grammar_bench.py [MODEL.gguf] [--tokens 256] [--reps 3]

Each run generates exactly --tokens tokens after the same prompt: without a grammar the end
token is ignored; with one, the schema asks for a long array so the reply is cut by the
token limit too. Three sampler settings: greedy, the default (top-k 40) and top-k off (the
grammar then masks the whole vocabulary on every token).
"""

from __future__ import annotations

import argparse
import json
import statistics

from chatapp.engine.local.process.local_engine import LocalEngine
from chatapp.engine.protocol import ChatMessage, Finished, GenerateRequest, LoadOptions
from chatapp.engine.schema_grammar import grammar_from_schema_text
from chatapp.models.bundled import smollm2_path
from chatapp.sampling import SamplerSettings

SCHEMA = {
    "type": "array",
    "minItems": 200,
    "maxItems": 200,
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 1, "maximum": 99},
            "mood": {"enum": ["happy", "sad", "calm"]},
        },
        "required": ["name", "age", "mood"],
    },
}
SETTINGS = {
    "greedy": SamplerSettings(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0),
    "default": SamplerSettings(),
    "top-k off": SamplerSettings(top_k=0),
}


def decode_tps(engine, settings: SamplerSettings, grammar, tokens: int) -> float:
    request = GenerateRequest(
        messages=(ChatMessage("user", "List many people as JSON."),),
        settings=settings.with_(max_tokens=tokens),
        grammar=grammar,
        ignore_eos=grammar is None,
    )
    end = [e for e in engine.generate(request) if isinstance(e, Finished)]
    assert end and end[0].stats.completion_tokens == tokens, end
    return end[0].stats.decode_tps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(smollm2_path()))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    grammar = grammar_from_schema_text(json.dumps(SCHEMA), "schema bench")
    engine = LocalEngine(
        LoadOptions(model_path=args.model, n_ctx=2048, n_gpu_layers=0, n_threads=args.threads)
    )
    engine.start()
    try:
        decode_tps(engine, SETTINGS["default"], grammar, 16)  # warm up
        for name, settings in SETTINGS.items():
            runs: dict[str, list[float]] = {"none": [], "schema": []}
            for _ in range(args.reps):  # alternated, so drift hits both alike
                runs["none"].append(decode_tps(engine, settings, None, args.tokens))
                runs["schema"].append(decode_tps(engine, settings, grammar, args.tokens))
            free, held = (statistics.median(runs[k]) for k in ("none", "schema"))
            print(
                f"{name:>10}: no grammar {free:6.1f} t/s | JSON schema {held:6.1f} t/s "
                f"({100 * (held / free - 1):+.0f}%)  runs {runs}"
            )
    finally:
        engine.close()


if __name__ == "__main__":
    main()
