"""Which options each of `chatapp bench`'s modes takes: one table, and every option given is
checked against the mode chosen (one mode at a time), before anything loads."""

from __future__ import annotations

from chatapp.errors import UsageError

LOADING = frozenset({"--model", "--ctx", "--ngl", "--threads", "--flash-attn", "--repack"})
COUNTS = frozenset({"--tokens", "--reps", "--json"})

# mode (None: the engine's own speed run) -> what it measures, and the options it takes
MODES: dict[str | None, tuple[str, frozenset[str]]] = {
    None: (
        "the engine's speed against llama-cpp-python and llama.cpp",
        COUNTS | LOADING | {"--depth", "--llama-bench", "--llama-server"},
    ),
    "--busy": (
        "the engine beside programs of its own",
        COUNTS
        | (LOADING - {"--threads"})
        | {"--depth", "--llama-bench", "--llama-server", "--load"},
    ),
    "--draft": ("speculative decoding on its own tasks", COUNTS | LOADING | {"--llama-server"}),
    "--alternatives": ("N replies in one batch against one reply", COUNTS | LOADING),
    "--estimate": (
        "the files it is given, at a context of 512",
        frozenset({"--reps", "--json", "--ngl", "--threads", "--flash-attn", "--repack"}),
    ),
    "--terminal": ("the TUI under tmux against `chatapp ask`", COUNTS | LOADING | {"--size"}),
    "--ui": ("the TUI streaming, headless", COUNTS | LOADING),
}

# a sentence of its own where the general one would not say what to do
WHY: dict[tuple[str | None, str], str] = {
    ("--busy", "--threads"): (
        "--threads pins the thread count, and --busy measures the engine choosing it (its "
        "pinned arm runs at the count the engine starts with): leave --threads out"
    ),
}


def choose_mode(modes: dict[str, bool], given: set[str]) -> str | None:
    """The one mode asked for (None: the speed run), every option in `given` taken by it;
    else a UsageError naming what does not go together."""
    asked = [m for m, on in modes.items() if on]
    if len(asked) > 1:
        raise UsageError(
            f"{' and '.join(asked)} are separate benchmarks and bench runs one at a time: "
            "give one of them"
        )
    mode = asked[0] if asked else None
    what, takes = MODES[mode]
    extra = sorted(given - takes, key=_order)
    if not extra:
        return mode
    for flag in extra:
        if (mode, flag) in WHY:
            raise UsageError(WHY[mode, flag])
    name = mode or "the speed run (no mode flag)"
    them = "them" if len(extra) > 1 else "it"
    hint = _belongs(extra)
    raise UsageError(
        f"{' and '.join(extra)}: {name} does not take {them} (it measures {what}); "
        f"leave {them} out{hint}"
    )


def _order(flag: str) -> int:
    order = ["--depth", "--llama-bench", "--llama-server", "--tokens", "--reps", "--json"]
    return order.index(flag) if flag in order else len(order)


def _belongs(extra: list[str]) -> str:
    """', or add --busy' when every option left over belongs to one mode only."""
    owners = {m for m, (_, takes) in MODES.items() if set(extra) <= takes}
    if len(owners) == 1:
        (owner,) = owners
        return f", or add {owner}" if owner else ""
    return ""
