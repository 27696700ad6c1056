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
    perplexity: float | None = None  # on REFERENCE_TEXT
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


def _generate(engine, request: GenerateRequest) -> tuple[list[int], Finished | None]:
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
    ref_reply: list[int],
    make_engine: Callable[[LoadOptions], object],
) -> tuple[RunResult, _Scored, list[int]]:
    """Load one file, generate, score the text; ref=None means this file is the reference."""
    card = inspect(path)
    engine = make_engine(replace(opts, model_path=path))
    try:
        info = engine.start()
        reply, finished = _generate(engine, request)
        ids = [t.id for t in engine.tokenize(REFERENCE_TEXT, special=False)]
        scored = _Scored(ids, engine.score(ids))
        rss = _peak_rss(engine.pid)
    finally:
        engine.close()
    note = ""
    if ref is None:
        agree, kl, ppl = quality(scored.logprobs, scored.logprobs, ids)
    elif ids == ref.ids and scored.logprobs.shape == ref.logprobs.shape:
        agree, kl, ppl = quality(ref.logprobs, scored.logprobs, ids)
    else:
        agree = kl = None
        ppl = quality(scored.logprobs, scored.logprobs, ids)[2]
        note = "another tokenizer than the reference: agreement and KL not compared"
    stats = finished.stats if finished else None
    result = RunResult(
        path=path,
        name=Path(path).name,
        quant=card.quant,
        size_bytes=card.file_size,
        is_reference=ref is None,
        load_s=info.load_s,
        peak_rss_bytes=rss,
        ttft_s=stats.ttft_s if stats else None,
        prefill_tps=stats.prefill_tps if stats else None,
        decode_tps=stats.decode_tps if stats else None,
        prompt_tokens=stats.prompt_tokens if stats else 0,
        completion_tokens=stats.completion_tokens if stats else 0,
        text=finished.text if finished else "",
        same_prefix_tokens=_common_prefix(reply, ref_reply if ref else reply),
        top1_agreement=agree,
        mean_kl=kl,
        perplexity=ppl,
        note=note,
    )
    return result, scored, reply


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
    opts = replace(base, model_path=ref_path, n_ctx=n_ctx, n_threads=threads)
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
    ref_result, ref_scored, ref_reply = _run_one(ref_path, opts, request, None, [], make_engine)
    results = {ref_path: ref_result}
    for p in paths_:
        if p == ref_path:
            continue
        say(f"running {p}")
        try:
            results[p] = _run_one(p, opts, request, ref_scored, ref_reply, make_engine)[0]
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
        text_tokens=len(ref_scored.ids),
        reference=ref_path,
        runs=runs,
        wall_s=time.perf_counter() - t0,
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


def _cells(r: RunResult) -> list[str]:
    return ["-" if (v := get(r)) is None else fmt.format(v) for _, get, fmt in COLUMNS]


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
    header = [h for h, _, _ in COLUMNS]
    rows = [_cells(r) for r in result.runs]
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
    out += [
        "",
        f"reference: {result.reference}; {result.text_tokens} text tokens scored; "
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
    header = [h for h, _, _ in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * 9) + "|"]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in result.runs]
    return "\n".join(lines)
