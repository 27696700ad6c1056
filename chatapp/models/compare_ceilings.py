"""Each compared file's decode ceiling here: memory read bandwidth over its bytes per token."""

from __future__ import annotations

from dataclasses import replace

from chatapp import ceilings, cpus, machine
from chatapp.errors import ChatappError
from chatapp.gguf.header import read_header
from chatapp.models.compare_result import RunResult
from chatapp.models.token_cost import model_cost


def read_gbps() -> float:
    """This machine's memory read bandwidth as measured before, else measured now (~1-3 s;
    kept, at the best measured, for the next time)."""
    saved = machine.saved_ceilings()
    if saved is None:
        saved = ceilings.best_of(None, ceilings.measure(cpus.usable_cpus()))
        machine.remember_ceilings(saved)
    return float(saved["mem_read_gbps"])


def with_ceiling(run: RunResult, gbps: float) -> RunResult:
    """The run with its bytes per decoded token (at its reply's mean depth), the decode
    speed that `gbps` allows it, and the share of that its measured decode reached."""
    if run.error or gbps <= 0:
        return run
    try:
        cost = model_cost(read_header(run.path))
    except (ChatappError, OSError):
        return run
    token = cost.at(run.prompt_tokens + run.completion_tokens // 2)
    ceiling = gbps * 1e9 / token.bytes
    share = run.decode_tps / ceiling if run.decode_tps else None
    return replace(
        run, bytes_per_token=token.bytes, decode_ceiling_tps=ceiling, ceiling_share=share
    )


def order_note(runs: tuple[RunResult, ...]) -> str:
    """Whether the measured decode speeds come in the order the ceilings predict (fewer bytes
    a token: faster), and where not, why."""
    ranked = [r for r in runs if r.decode_ceiling_tps and r.decode_tps]
    by_ceiling = sorted(ranked, key=lambda r: r.decode_ceiling_tps or 0, reverse=True)
    by_speed = sorted(ranked, key=lambda r: r.decode_tps or 0, reverse=True)
    if len(ranked) < 2 or by_ceiling == by_speed:
        return "the measured decode speeds come in the order the ceilings predict"
    for fewer, more in zip(by_ceiling, by_ceiling[1:], strict=False):
        if (fewer.decode_tps or 0) < (more.decode_tps or 0):
            return (
                f"{fewer.name} reads fewer bytes a token than {more.name} but decodes slower: "
                f"its weights cost more arithmetic to unpack ({fewer.quant} vs {more.quant}), "
                "and at this share of the memory ceiling arithmetic, not reading, sets the pace"
            )
    return "the measured decode speeds come in the order the ceilings predict"
