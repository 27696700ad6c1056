"""Fit a conversation into the context window: leave out the oldest turns, keep the newest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class _HasRole(Protocol):
    @property
    def role(self) -> str: ...


M = TypeVar("M", bound=_HasRole)


def turns(messages: Sequence[M]) -> tuple[list[M], list[list[M]]]:
    """Split into the leading system messages and turns (a user message and what follows it).

    Messages before the first user message (e.g. an assistant greeting) are a turn of their own.
    """
    n_system = 0
    while n_system < len(messages) and messages[n_system].role == "system":
        n_system += 1
    groups: list[list[M]] = []
    for message in messages[n_system:]:
        if message.role == "user" or not groups:
            groups.append([])
        groups[-1].append(message)
    return list(messages[:n_system]), groups


def fit_messages(
    messages: Sequence[M],
    count_tokens: Callable[[list[M]], int | None],
    n_ctx: int,
    reply_budget: int,
) -> tuple[list[M], int]:
    """The messages that fit in n_ctx - reply_budget tokens, and how many were left out.

    Whole turns are left out from the oldest; the leading system messages and the newest turn
    are always kept (if even they do not fit, they are returned anyway and the engine reports a
    full context). `count_tokens` renders the chat template over a list of messages and counts
    its tokens (None when it cannot tell, as for a server whose template is not known here:
    then nothing is left out); it is called at most 1 + ceil(log2(turns)) times: the number of
    tokens only shrinks as older turns are left out, so the cut point is found by binary search.
    """
    messages = list(messages)
    budget = n_ctx - reply_budget
    system, groups = turns(messages)
    if len(groups) <= 1:
        return messages, 0
    total = count_tokens(messages)
    if total is None or total <= budget:
        return messages, 0

    def without_oldest(k: int) -> list[M]:
        return system + [m for group in groups[k:] for m in group]

    lo, hi = 1, len(groups) - 1  # the answer is in [lo, hi]; hi is kept even if it is too long
    while lo < hi:
        mid = (lo + hi) // 2
        n = count_tokens(without_oldest(mid))
        if n is None or n <= budget:  # a count that cannot be told is taken as fitting
            hi = mid
        else:
            lo = mid + 1
    kept = without_oldest(lo)
    return kept, len(messages) - len(kept)


def left_out_note(dropped: int, n_ctx: int) -> str:
    """What the screen says when the oldest `dropped` messages no longer fit ("" for none)."""
    if dropped <= 0:
        return ""
    which = "message" if dropped == 1 else f"{dropped:,} messages"
    return f"the model no longer sees the first {which} (context {n_ctx:,} tokens)"
