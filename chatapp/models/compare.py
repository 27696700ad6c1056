"""Compare GGUF files (quantizations of one model): size, speed, memory, quality vs a reference."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

import numpy as np

from chatapp.cpu_load import OtherPrograms, disturbed, share_of_cpu
from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    TokenPiece,
)
from chatapp.gguf.header import inspect
from chatapp.models import compare_ceilings, perplexity
from chatapp.models.compare_measures import (
    Replier,
    Scored,
    common_prefix,
    disturbed_note,
    peak_rss,
    quality,
    reply_ids,
    with_text_score,
)
from chatapp.models.compare_result import CompareResult, RunResult
from chatapp.models.compare_runs import save_result
from chatapp.sampling import SamplerSettings

DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."
DEFAULT_TOKENS = 64
SEED = 1234

# The fixed text every file is scored on (next-token distributions, perplexity): plain English
# prose, about 200 tokens with the SmolLM2 tokenizer. Written for this module.
REFERENCE_TEXT = (
    "The river begins as a thin stream high in the mountains, where snow melts slowly under "
    "the spring sun. As it runs downhill, it gathers water from small creeks and grows wider "
    "and stronger. Farmers in the valley have used this river for centuries. They dig channels "
    "to bring water to their fields of wheat and barley, and they build low stone walls to keep "
    "the banks from washing away during heavy rain. In the town, the river turns an old mill "
    "wheel that once ground flour for every family nearby. Today the mill is a small museum, "
    "and children visit it to learn how people lived before electricity. Further south, the "
    "river slows down and spreads into wetlands full of birds, frogs and tall grass. Scientists "
    "come here every year to count the birds, because their numbers tell us whether the water "
    "is still clean. When the river finally reaches the sea, it carries sand and mud that "
    "slowly build new land at its mouth."
)


class ComparedEngine(Replier, perplexity.TextScorer, Protocol):
    """What comparing needs of an engine (LocalEngine; the tests' fakes): load, reply, score
    the built-in paragraph or a text, and the worker's process for its peak memory."""

    @property
    def pid(self) -> int | None: ...

    def start(self) -> ModelInfo: ...

    def tokenize(self, text: str, special: bool = True) -> list[TokenPiece]: ...

    def score(self, tokens: list[int]) -> np.ndarray: ...

    def close(self) -> None: ...


EngineMaker = Callable[[LoadOptions], ComparedEngine]


@dataclass
class _Measured:
    """What one loaded file gave: its load, reply, CPU share beside it, scores and memory."""

    info: ModelInfo
    reply: list[int]
    finished: Finished | None
    busy: float | None
    unsure: bool
    scored: Scored | None
    text_score: perplexity.TextScore | None
    rss: int | None


def _measure(
    engine: ComparedEngine,
    path: str,
    request: GenerateRequest,
    is_reference: bool,
    scoring: _TextJob | None,
) -> _Measured:
    """Start the engine, reply, and score the built-in paragraph (or the user's text)."""
    scored = text_score = None
    info = engine.start()
    others = OtherPrograms()  # this process and the worker left out
    reply, finished = reply_ids(engine, request)
    busy_cores = others()
    busy = share_of_cpu(busy_cores)
    unsure = disturbed(busy_cores, info.n_threads)
    if scoring is None:
        ids = [t.id for t in engine.tokenize(REFERENCE_TEXT, special=False)]
        scored = Scored(ids, engine.score(ids))
    else:
        text_score = perplexity.score_file(
            engine,
            scoring.text,
            scoring.n_ctx,
            scoring.base,
            is_reference,
            scoring.progress(Path(path).name),
        )
    rss = peak_rss(engine.pid)
    return _Measured(info, reply, finished, busy, unsure, scored, text_score, rss)


def _paragraph_quality(
    scored: Scored | None, ref: Scored | None, is_reference: bool
) -> tuple[float | None, float | None, float | None, str]:
    """(agreement, KL, perplexity, note) of the built-in paragraph against the reference's."""
    if scored is None:
        return None, None, None, ""
    ids = scored.ids
    if is_reference:
        return (*quality(scored.logprobs, scored.logprobs, ids), "")
    if ref is not None and ids == ref.ids and scored.logprobs.shape == ref.logprobs.shape:
        return (*quality(ref.logprobs, scored.logprobs, ids), "")
    ppl = quality(scored.logprobs, scored.logprobs, ids)[2]
    return None, None, ppl, "another tokenizer than the reference: agreement and KL not compared"


def _run_one(
    path: str,
    opts: LoadOptions,
    request: GenerateRequest,
    ref: Scored | None,
    ref_reply: list[int] | None,
    make_engine: EngineMaker,
    scoring: _TextJob | None = None,
) -> tuple[RunResult, Scored | None, list[int]]:
    """Load one file, generate, score a text: the built-in paragraph, or with `scoring` the
    user's text (and only that). ref_reply=None means this file is the reference."""
    is_reference = ref_reply is None
    card = inspect(path)
    engine = make_engine(replace(opts, model_path=path))
    try:
        m = _measure(engine, path, request, is_reference, scoring)
    finally:
        engine.close()
    agree, kl, ppl, note = _paragraph_quality(m.scored, ref, is_reference)
    if m.unsure and m.busy is not None:
        note = "; ".join(filter(None, [disturbed_note(Path(path).name, m.busy), note]))
    stats = m.finished.stats if m.finished else None
    result = RunResult(
        path=path,
        name=Path(path).name,
        quant=card.quant,
        size_bytes=card.file_size,
        is_reference=is_reference,
        load_s=m.info.load_s,
        peak_rss_bytes=m.rss,
        ttft_s=stats.ttft_s if stats else None,
        prefill_tps=stats.prefill_tps if stats else None,
        decode_tps=stats.decode_tps if stats else None,
        prompt_tokens=stats.prompt_tokens if stats else 0,
        completion_tokens=stats.completion_tokens if stats else 0,
        text=m.finished.text if m.finished else "",
        same_prefix_tokens=common_prefix(m.reply, m.reply if ref_reply is None else ref_reply),
        top1_agreement=agree,
        mean_kl=kl,
        perplexity=ppl,
        busy_share=m.busy,
        disturbed=m.unsure,
        note=note,
    )
    if m.text_score is not None:
        result = with_text_score(result, m.text_score)
    return result, m.scored, m.reply


@dataclass(frozen=True)
class _TextJob:
    text: str
    n_ctx: int
    base: Path
    progress: perplexity.ProgressFactory


def _same_file(a: str | Path, b: str | Path) -> bool:
    return Path(a).absolute() == Path(b).absolute()  # links keep their own names


def _local_engine(opts: LoadOptions) -> ComparedEngine:
    from chatapp.engine.local.process.local_engine import LocalEngine

    return LocalEngine(opts)


def compare(
    files: Sequence[str | Path],
    prompt: str = DEFAULT_PROMPT,
    tokens: int = DEFAULT_TOKENS,
    reference: str | Path | None = None,
    n_threads: int | None = None,
    options: LoadOptions | None = None,
    seed: int = SEED,
    save: bool = True,
    make_engine: EngineMaker | None = None,  # default: LocalEngine
    progress: Callable[[str], None] | None = None,
    text_file: str | Path | None = None,
    text_ctx: int = 512,
    text_progress: perplexity.ProgressFactory | None = None,
) -> CompareResult:
    """Run every file with the same prompt and greedy settings, one engine at a time.

    Each run loads with `options` (default: CPU only), its own context size, and `n_threads`
    when given."""
    t0 = time.perf_counter()
    paths_, ref_path = _files_and_reference(files, reference)
    base = options or LoadOptions(model_path=ref_path, n_gpu_layers=0)
    threads = n_threads or base.threads
    n_ctx = max(1024, len(prompt.encode()) + tokens + 128)  # a token is at least one byte
    scoring = None
    if text_file is not None:
        scoring = _text_job(ref_path, text_file, text_ctx, base, text_progress)
        n_ctx = max(n_ctx, text_ctx)
    opts = replace(base, model_path=ref_path, n_ctx=n_ctx, n_threads=threads)
    if scoring is not None:
        opts = replace(opts, n_batch=max(opts.n_batch, text_ctx))
    request = _greedy_request(prompt, tokens, seed)
    make = make_engine or _local_engine
    runs, ref_scored = _run_all(paths_, ref_path, opts, request, make, scoring, progress)
    gbps = compare_ceilings.read_gbps()
    runs = tuple(compare_ceilings.with_ceiling(r, gbps) for r in runs)
    out = CompareResult(
        created=datetime.now().astimezone().isoformat(timespec="seconds"),
        prompt=prompt,
        tokens=tokens,
        seed=seed,
        n_ctx=n_ctx,
        n_threads=threads,
        text_tokens=len(ref_scored.ids) if ref_scored else 0,
        reference=ref_path,
        runs=runs,
        wall_s=time.perf_counter() - t0,
        text_file=str(text_file or ""),
        text_ctx=text_ctx if scoring else 0,
        mem_read_gbps=gbps,
    )
    if save:
        out = save_result(out)
    return out


def _files_and_reference(
    files: Sequence[str | Path], reference: str | Path | None
) -> tuple[list[str], str]:
    """The files once each (the reference first when it was not among them), every header
    checked, and the reference: the one given, else the largest file."""
    paths_ = list(dict.fromkeys(str(f) for f in files))
    ref_path = ""
    if reference is not None:
        ref_path = next((p for p in paths_ if _same_file(p, reference)), str(reference))
        if ref_path not in paths_:
            paths_.insert(0, ref_path)
    if not paths_:
        raise EngineError("compare needs at least one GGUF file")
    sizes = {p: inspect(p).file_size for p in paths_}  # validates every file first
    if reference is None:
        ref_path = max(paths_, key=lambda p: sizes[p])
    return paths_, ref_path


def _text_job(
    ref_path: str,
    text_file: str | Path,
    text_ctx: int,
    base: LoadOptions,
    text_progress: perplexity.ProgressFactory | None,
) -> _TextJob:
    """The user's text to score every file on (--text), in windows of `text_ctx` tokens."""
    if text_ctx < 8:
        raise EngineError(f"--ctx {text_ctx} is too small to score a text: use 128 or more")
    text = perplexity.read_text(text_file)
    base_path = perplexity.base_cache_path(ref_path, text, text_ctx, base)
    return _TextJob(text, text_ctx, base_path, text_progress or (lambda _name: None))


def _greedy_request(prompt: str, tokens: int, seed: int) -> GenerateRequest:
    """The one request every file answers: greedy, `tokens` long whatever the model says."""
    settings = SamplerSettings(
        temperature=0.0,
        top_k=1,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=1.0,
        max_tokens=tokens,
        seed=seed,
    )
    return GenerateRequest(
        messages=(ChatMessage("user", prompt),), settings=settings, ignore_eos=True, top_n=0
    )


def _run_all(
    paths_: list[str],
    ref_path: str,
    opts: LoadOptions,
    request: GenerateRequest,
    make: EngineMaker,
    scoring: _TextJob | None,
    progress: Callable[[str], None] | None,
) -> tuple[tuple[RunResult, ...], Scored | None]:
    """The reference first, then the others against it; a file that fails gets its error."""
    say = progress or (lambda _msg: None)
    say(f"reference: {ref_path}")
    ref_result, ref_scored, ref_reply = _run_one(ref_path, opts, request, None, None, make, scoring)
    results = {ref_path: ref_result}
    for p in paths_:
        if p == ref_path:
            continue
        say(f"running {p}")
        try:
            results[p] = _run_one(p, opts, request, ref_scored, ref_reply, make, scoring)[0]
        except EngineError as exc:
            card = inspect(p)
            results[p] = RunResult(p, Path(p).name, card.quant, card.file_size, error=str(exc))
    return tuple(results[p] for p in dict.fromkeys(paths_)), ref_scored
