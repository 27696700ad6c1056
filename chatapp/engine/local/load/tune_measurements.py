"""`chatapp tune`'s measurements: decode at depths and prefill per flash attn / threads / repack."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from chatapp import cpus
from chatapp.engine.protocol import Engine, Finished, GenerateRequest, LoadOptions
from chatapp.sampling import SamplerSettings

TEXT = (
    "A river begins as rain on a hill, finds the lowest way down, and carries what it meets "
    "to the sea: sand, leaves, the names of the towns it passes and the stories of the people "
    "who crossed it. "
)


@dataclass(frozen=True)
class TuneChoice:
    """One way to run the model here."""

    flash_attn: bool
    threads: int
    repack: bool

    def label(self) -> str:
        fa = "on" if self.flash_attn else "off"
        return f"fa {fa:<3} threads {self.threads:<2} repack {'on' if self.repack else 'off'}"


@dataclass
class Measured:
    """What one configuration did: decode t/s at each depth, prefill t/s, or why it failed."""

    config: TuneChoice
    decode: dict[int, float] = field(default_factory=dict)
    prefill: float = 0.0
    error: str = ""
    extra_buffers: tuple[str, ...] = ()

    @property
    def score(self) -> float:
        return 0.0 if self.error else depth_score(self.decode)


def depth_score(decode_tps: dict[int, float]) -> float:
    """Geometric mean of decode t/s over the depths (a chat lives at every depth); 0 when
    none decoded."""
    rates = [r for r in decode_tps.values() if r > 0]
    return math.exp(sum(math.log(r) for r in rates) / len(rates)) if rates else 0.0


def thread_counts() -> list[int]:
    """The usable physical cores, one less (room for the UI), and every usable CPU (this
    process's share of the machine: cpus.usable_cpus); distinct, >= 1."""
    physical, logical = cpus.usable_cores(), cpus.usable_cpus()
    return sorted({physical, max(physical - 1, 1), logical}, reverse=True)


def configs(repack_choices: list[bool]) -> list[TuneChoice]:
    return [
        TuneChoice(fa, threads, repack)
        for repack in repack_choices
        for threads in thread_counts()
        for fa in (False, True)
    ]


def depths_for(n_ctx: int, tokens: int, wanted: tuple[int, ...] = (0, 512, 2048)) -> list[int]:
    """The depths to decode at, the deepest capped to what the context holds."""
    room = n_ctx - tokens - 1
    return sorted({min(d, room) for d in wanted if room > 0})


def _prompt(engine, depth: int) -> tuple[int, ...]:
    ids = [p.id for p in engine.tokenize(TEXT * (2 + depth // 30), special=False)]
    return tuple(ids[: max(depth, 1)])


def measure_one(
    make_engine: Callable[[LoadOptions], Engine],
    options: LoadOptions,
    config: TuneChoice,
    depths: list[int],
    tokens: int,
    step: Callable[[str], None] = lambda _: None,
) -> Measured:
    """Load with `config`, then decode `tokens` greedily after each depth (deepest last, so
    each prompt extends the one before it and only the new part is prefilled)."""
    opts = replace(
        options, flash_attn=config.flash_attn, n_threads=config.threads, repack=config.repack
    )
    result = Measured(config)
    engine = make_engine(opts)
    try:
        info = engine.start()
        result.extra_buffers = info.extra_buffers
        if config.repack and not info.repack:
            result.error = "extra buffers crashed here"
            return result
        deepest = _prompt(engine, depths[-1])
        most_prefilled = 0
        for depth in [-1, *depths]:  # -1: a short warm-up reply, not measured
            req = GenerateRequest(
                messages=(),
                settings=SamplerSettings(temperature=0.0, max_tokens=tokens if depth >= 0 else 4),
                prompt_ids=deepest[: max(depth, 1)],
                ignore_eos=True,
                top_n=10,  # as the chat runs: the candidate view is part of every step
            )
            end = next(e for e in engine.generate(req) if isinstance(e, Finished))
            if depth < 0:
                continue
            result.decode[depth] = end.stats.decode_tps or 0.0
            if end.stats.prompt_evaluated > most_prefilled:  # the longest prefill is the figure
                most_prefilled = end.stats.prompt_evaluated
                result.prefill = end.stats.prefill_tps or 0.0
            step(f"{config.label()} depth {depth}")
    except Exception as exc:  # a config that fails is reported, not fatal
        result.error = str(exc).split(";")[0]
    finally:
        engine.close()
    return result


def best(results: list[Measured]) -> Measured | None:
    ok = [r for r in results if not r.error and r.score > 0]
    return max(ok, key=lambda r: (r.score, r.prefill)) if ok else None


def saved_form(
    winner: Measured, options: LoadOptions, depths: list[int], gpu_offload: bool
) -> dict:
    """What is remembered for the file: the settings and the figures that chose them, and
    whether the build could offload (without, every layer count runs on the CPU alike)."""
    return {
        **asdict(winner.config),
        "n_gpu_layers": options.n_gpu_layers,
        "gpu_offload": gpu_offload,
        "decode_tps": {str(d): round(r, 1) for d, r in winner.decode.items()},
        "prefill_tps": round(winner.prefill, 1),
        "depths": depths,
    }
