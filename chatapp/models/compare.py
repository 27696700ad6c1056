"""Compare GGUF files (quantizations of one model): size, speed, memory, quality vs a reference."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from chatapp import paths
from chatapp.engine.protocol import (
    ChatMessage,
    EngineError,
    Failed,
    Finished,
    GenerateRequest,
    LoadOptions,
    Token,
)
from chatapp.models import perplexity
from chatapp.models.gguf_info import inspect
from chatapp.sampling import SamplerSettings
from chatapp.stats_text import DECODE_FORMAT, MS_FORMAT, PREFILL_FORMAT

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


@dataclass(frozen=True)
class RunResult:
    """One file: what it cost and how close it stays to the reference."""

    path: str
    name: str
    quant: str
    size_bytes: int
    is_reference: bool = False
    load_s: float | None = None
    peak_rss_bytes: int | None = None  # VmHWM of the worker (mapped weights included)
    ttft_s: float | None = None
    prefill_tps: float | None = None
    decode_tps: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    text: str = ""  # the greedy reply
    same_prefix_tokens: int = 0  # leading reply tokens equal to the reference's reply
    top1_agreement: float | None = None  # share of positions with the reference's top token
    mean_kl: float | None = None  # mean KL(reference || this), nats per token
    perplexity: float | None = None  # on REFERENCE_TEXT, or the user's text (--text)
    # with --text, scored as llama-perplexity does (chunks of text_ctx, second halves):
    perplexity_err: float | None = None
    ppl_ratio: float | None = None  # PPL / the reference's PPL
    kld_err: float | None = None
    kld_p99: float | None = None
    same_top_err: float | None = None
    rms_dp: float | None = None
    scored_tokens: int = 0
    score_s: float | None = None
    error: str = ""  # the file could not be run
    note: str = ""  # something to know about the figures


@dataclass(frozen=True)
class CompareResult:
    """A whole comparison run."""

    created: str
    prompt: str
    tokens: int
    seed: int
    n_ctx: int
    n_threads: int
    text_tokens: int  # tokens of REFERENCE_TEXT (with the reference's tokenizer)
    reference: str
    runs: tuple[RunResult, ...]
    wall_s: float = 0.0
    saved_to: str = field(default="", compare=False)
    text_file: str = ""  # --text: the user's text, scored in chunks of text_ctx
    text_ctx: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


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
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reply_ids(engine, request: GenerateRequest) -> tuple[list[int], Finished | None]:
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
    make_engine: Callable[[LoadOptions], object],
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
        reply, finished = reply_ids(engine, request)
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
        same_prefix_tokens=_common_prefix(reply, reply if is_reference else ref_reply),
        top1_agreement=agree,
        mean_kl=kl,
        perplexity=ppl,
        note=note,
    )
    if text_score is not None:
        result = with_text_score(result, text_score)
    return result, scored, reply


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


def _local_engine(opts: LoadOptions):
    from chatapp.engine.factory import make_engine

    return make_engine(opts)


def compare(
    files: Sequence[str | Path],
    prompt: str = DEFAULT_PROMPT,
    tokens: int = DEFAULT_TOKENS,
    reference: str | Path | None = None,
    n_threads: int | None = None,
    options: LoadOptions | None = None,
    seed: int = SEED,
    save: bool = True,
    make_engine: Callable[[LoadOptions], object] = _local_engine,
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
    say(f"reference: {ref_path}")
    ref_result, ref_scored, ref_reply = _run_one(
        ref_path, opts, request, None, None, make_engine, scoring
    )
    results = {ref_path: ref_result}
    for p in paths_:
        if p == ref_path:
            continue
        say(f"running {p}")
        try:
            results[p] = _run_one(p, opts, request, ref_scored, ref_reply, make_engine, scoring)[0]
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
        out = _save(out)
    return out


def _save(result: CompareResult) -> CompareResult:
    folder = paths.cache_dir() / "compare"
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


# ---- formatting -----------------------------------------------------------------------------

COLUMNS = (  # (header, getter, format)
    ("file", lambda r: r.name, "{}"),
    ("quant", lambda r: r.quant, "{}"),
    ("size MiB", lambda r: r.size_bytes / 2**20, "{:.1f}"),
    ("load s", lambda r: r.load_s, "{:.2f}"),
    ("RSS MiB", lambda r: None if r.peak_rss_bytes is None else r.peak_rss_bytes / 2**20, "{:.0f}"),
    ("TTFT ms", lambda r: None if r.ttft_s is None else r.ttft_s * 1000, f"{{:{MS_FORMAT}}}"),
    ("prefill t/s", lambda r: r.prefill_tps, f"{{:{PREFILL_FORMAT}}}"),
    ("decode t/s", lambda r: r.decode_tps, f"{{:{DECODE_FORMAT}}}"),
    ("top-1 %", lambda r: None if r.top1_agreement is None else r.top1_agreement * 100, "{:.1f}"),
    ("KL", lambda r: r.mean_kl, "{:.4f}"),
    ("PPL", lambda r: r.perplexity, "{:.2f}"),
)  # fmt: skip


TEXT_COLUMNS = (  # with --text: llama-perplexity's figures (uncertainties after the table)
    ("PPL ±", lambda r: r.perplexity_err, "{:.3f}"),
    ("PPL ratio", lambda r: r.ppl_ratio, "{:.4f}"),
    ("KLD 99%", lambda r: r.kld_p99, "{:.4f}"),
    ("RMS Δp %", lambda r: _pct(r.rms_dp), "{:.2f}"),
    ("tokens", lambda r: r.scored_tokens or None, "{}"),
    ("score s", lambda r: r.score_s, "{:.1f}"),
)


def table_columns(text: bool) -> tuple:
    """The table's columns; with `text` (a run with --text) llama-perplexity's figures too."""
    if text:
        top1 = ("same top %", COLUMNS[8][1], COLUMNS[8][2])
        return (*COLUMNS[:8], top1, *COLUMNS[9:], *TEXT_COLUMNS)
    return COLUMNS


def _columns(result: CompareResult) -> tuple:
    return table_columns(bool(result.text_file))


def _cells(r: RunResult, columns: tuple = COLUMNS) -> list[str]:
    return ["-" if (v := get(r)) is None else fmt.format(v) for _, get, fmt in columns]


def _bar(value: float, top: float, width: int = 24) -> str:
    eighths = int(round(width * 8 * value / top)) if top > 0 else 0
    full, part = divmod(max(eighths, 0), 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100


BARS = (
    ("decode speed", lambda r: r.decode_tps, " t/s"),
    ("top-1 agreement with the reference", lambda r: _pct(r.top1_agreement), " %"),
    ("size", lambda r: r.size_bytes / 2**20, " MiB"),
)


def format_table(result: CompareResult) -> str:
    """A text table, then bars for decode speed, agreement and size."""
    columns = _columns(result)
    header = [h for h, _, _ in columns]
    rows = [_cells(r, columns) for r in result.runs]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs)

    out = [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    name_w = max(len(r.name) for r in result.runs)
    for title, get, unit in BARS:
        values = [get(r) or 0.0 for r in result.runs]
        top = max(values, default=0.0)
        out += ["", title]
        for r, v in zip(result.runs, values, strict=True):
            out.append(f"  {r.name.ljust(name_w)}  {_bar(v, top)} {v:.1f}{unit}")
    if result.text_file:
        scored = max((r.scored_tokens for r in result.runs), default=0)
        scored_on = f"{scored} tokens of {result.text_file} scored in chunks of {result.text_ctx}"
    else:
        scored_on = f"{result.text_tokens} text tokens scored"
    out += [
        "",
        f"reference: {result.reference}; {scored_on}; "
        f"{result.tokens} tokens generated greedily; {result.wall_s:.1f} s in all",
    ]
    out += [f"! {r.name}: {r.error or r.note}" for r in result.runs if r.error or r.note]
    return "\n".join(out)


def to_json(result: CompareResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


def to_csv(result: CompareResult) -> str:
    buf = io.StringIO()
    names = [f.name for f in RunResult.__dataclass_fields__.values() if f.name != "text"]
    writer = csv.DictWriter(buf, fieldnames=names, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in result.runs:
        writer.writerow(asdict(r))
    return buf.getvalue()


def to_markdown(result: CompareResult) -> str:
    columns = _columns(result)
    header = [h for h, _, _ in columns]
    aligns = ["---"] * 2 + ["---:"] * (len(columns) - 2)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(_cells(r, columns)) + " |" for r in result.runs]
    return "\n".join(lines)
