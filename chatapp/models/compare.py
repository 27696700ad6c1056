"""Compare GGUF files (quantizations of one model): size, speed, memory, quality vs a reference."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

import numpy as np

from chatapp.cpu_load import OtherPrograms, disturbed, share_of_cpu
from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Event,
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    Token,
    TokenPiece,
)
from chatapp.gguf.header import inspect
from chatapp.models import perplexity
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


class Replier(Protocol):
    """An engine that replies (any Engine)."""

    def generate(self, request: GenerateRequest) -> Iterator[Event]: ...


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
class _Scored:
    ids: list[int]
    logprobs: np.ndarray  # (len(ids) - 1, n_vocab) float32


def quality(ref: np.ndarray, other: np.ndarray, ids: Sequence[int]) -> tuple[float, float, float]:
    """(top-1 agreement, mean KL(ref || other), perplexity of `other`) from log-prob rows."""
    if ref.shape != other.shape:
        raise ValueError(f"log-prob shapes differ: {ref.shape} vs {other.shape}")
    n = ref.shape[0]
    if n == 0:
        return 1.0, 0.0, float("nan")
    agree = float(np.mean(ref.argmax(axis=1) == other.argmax(axis=1)))
    kl = 0.0
    for i in range(0, n, 64):  # in slices: a float64 copy of all rows would be large
        r = ref[i : i + 64].astype(np.float64)
        o = other[i : i + 64].astype(np.float64)
        kl += float(np.sum(np.exp(r) * (r - o)))
    targets = np.asarray(ids[1 : n + 1])
    nll = -other[np.arange(n), targets].astype(np.float64)
    return agree, max(kl / n, 0.0), float(np.exp(nll.mean()))


def _peak_rss(pid: int | None) -> int | None:
    """The worker's peak resident memory (Linux's VmHWM; None elsewhere): psutil has no API
    for the peak on Linux or macOS, so /proc is read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reply_ids(engine: Replier, request: GenerateRequest) -> tuple[list[int], Finished | None]:
    """One reply's token ids and its Finished event (None if it never came); a Failed event
    raises EngineError."""
    reply: list[int] = []
    finished = None
    for event in engine.generate(request):
        if isinstance(event, Token):
            reply.append(event.id)
        elif isinstance(event, Finished):
            finished = event
        elif isinstance(event, Failed):
            raise EngineError(event.message)
    return reply, finished


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _run_one(
    path: str,
    opts: LoadOptions,
    request: GenerateRequest,
    ref: _Scored | None,
    ref_reply: list[int] | None,
    make_engine: EngineMaker,
    scoring: _TextJob | None = None,
) -> tuple[RunResult, _Scored | None, list[int]]:
    """Load one file, generate, score a text: the built-in paragraph, or with `scoring` the
    user's text (and only that). ref_reply=None means this file is the reference."""
    is_reference = ref_reply is None
    card = inspect(path)
    engine = make_engine(replace(opts, model_path=path))
    scored = text_score = None
    try:
        info = engine.start()
        others = OtherPrograms()  # this process and the worker left out
        reply, finished = reply_ids(engine, request)
        busy_cores = others()
        busy = share_of_cpu(busy_cores)
        unsure = disturbed(busy_cores, info.n_threads)
        if scoring is None:
            ids = [t.id for t in engine.tokenize(REFERENCE_TEXT, special=False)]
            scored = _Scored(ids, engine.score(ids))
        else:
            text_score = perplexity.score_file(
                engine,
                scoring.text,
                scoring.n_ctx,
                scoring.base,
                is_reference,
                scoring.progress(Path(path).name),
            )
        rss = _peak_rss(engine.pid)
    finally:
        engine.close()
    note = ""
    agree = kl = ppl = None
    if scored is not None:
        ids = scored.ids
        if is_reference:
            agree, kl, ppl = quality(scored.logprobs, scored.logprobs, ids)
        elif ref is not None and ids == ref.ids and scored.logprobs.shape == ref.logprobs.shape:
            agree, kl, ppl = quality(ref.logprobs, scored.logprobs, ids)
        else:
            ppl = quality(scored.logprobs, scored.logprobs, ids)[2]
            note = "another tokenizer than the reference: agreement and KL not compared"
    if unsure and busy is not None:
        note = "; ".join(filter(None, [disturbed_note(Path(path).name, busy), note]))
    stats = finished.stats if finished else None
    result = RunResult(
        path=path,
        name=Path(path).name,
        quant=card.quant,
        size_bytes=card.file_size,
        is_reference=is_reference,
        load_s=info.load_s,
        peak_rss_bytes=rss,
        ttft_s=stats.ttft_s if stats else None,
        prefill_tps=stats.prefill_tps if stats else None,
        decode_tps=stats.decode_tps if stats else None,
        prompt_tokens=stats.prompt_tokens if stats else 0,
        completion_tokens=stats.completion_tokens if stats else 0,
        text=finished.text if finished else "",
        same_prefix_tokens=_common_prefix(reply, reply if ref_reply is None else ref_reply),
        top1_agreement=agree,
        mean_kl=kl,
        perplexity=ppl,
        busy_share=busy,
        disturbed=unsure,
        note=note,
    )
    if text_score is not None:
        result = with_text_score(result, text_score)
    return result, scored, reply


def disturbed_note(name: str, share: float) -> str:
    """The sentence a speed measured beside another busy program gets."""
    return (
        f"{name}'s speed was measured while other programs used {share:.0%} of the CPU: "
        "run again on a quiet machine before ranking it"
    )


@dataclass(frozen=True)
class _TextJob:
    text: str
    n_ctx: int
    base: Path
    progress: perplexity.ProgressFactory


def with_text_score(result: RunResult, score: perplexity.TextScore) -> RunResult:
    """The --text figures (the reference agrees with itself: KL 0, same top 100%)."""
    return replace(
        result,
        perplexity=score.ppl,
        perplexity_err=score.ppl_err,
        ppl_ratio=score.ppl_ratio,
        mean_kl=0.0 if result.is_reference else score.mean_kld,
        kld_err=score.mean_kld_err,
        kld_p99=score.kld_p99,
        top1_agreement=1.0 if result.is_reference else score.same_top,
        same_top_err=score.same_top_err,
        rms_dp=score.rms_dp,
        scored_tokens=score.scored_tokens,
        score_s=score.seconds,
    )


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
    paths_ = list(dict.fromkeys(str(f) for f in files))
    if reference is not None:
        ref_path = next((p for p in paths_ if _same_file(p, reference)), str(reference))
        if ref_path not in paths_:
            paths_.insert(0, ref_path)
    if not paths_:
        raise EngineError("compare needs at least one GGUF file")
    sizes = {p: inspect(p).file_size for p in paths_}  # validates every file first
    if reference is None:
        ref_path = max(paths_, key=lambda p: sizes[p])
    base = options or LoadOptions(model_path=ref_path, n_gpu_layers=0)
    threads = n_threads or base.threads
    n_ctx = max(1024, len(prompt.encode()) + tokens + 128)  # a token is at least one byte
    scoring = None
    if text_file is not None:
        if text_ctx < 8:
            raise EngineError(f"--ctx {text_ctx} is too small to score a text: use 128 or more")
        text = perplexity.read_text(text_file)
        base_path = perplexity.base_cache_path(ref_path, text, text_ctx, base)
        scoring = _TextJob(text, text_ctx, base_path, text_progress or (lambda _name: None))
        n_ctx = max(n_ctx, text_ctx)
    opts = replace(base, model_path=ref_path, n_ctx=n_ctx, n_threads=threads)
    if scoring is not None:
        opts = replace(opts, n_batch=max(opts.n_batch, text_ctx))
    settings = SamplerSettings(
        temperature=0.0,
        top_k=1,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=1.0,
        max_tokens=tokens,
        seed=seed,
    )
    request = GenerateRequest(
        messages=(ChatMessage("user", prompt),), settings=settings, ignore_eos=True, top_n=0
    )
    say = progress or (lambda _msg: None)
    make = make_engine or _local_engine
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
    runs = tuple(results[p] for p in dict.fromkeys(paths_))
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
    )
    if save:
        out = save_result(out)
    return out
