"""GBNF for JSON integers within bounds (llama-cpp-python's schema converter leaves them open)."""

from __future__ import annotations

import math


def _digits(a: str, b: str) -> list[str]:
    """Alternatives (GBNF sequences) for the digit strings of one length from a to b."""
    if not a:
        return [""]
    if a == b:
        return [f'"{a}"']
    if a[0] == b[0]:
        return [_seq(f'"{a[0]}"', rest) for rest in _digits(a[1:], b[1:])]
    n = len(a) - 1
    out: list[str] = []
    lo, hi = int(a[0]), int(b[0])
    if a[1:] != "0" * n:  # the first digit's partial range: a[0] then a[1:]..99
        out += [_seq(f'"{a[0]}"', rest) for rest in _digits(a[1:], "9" * n)]
        lo += 1
    tail_partial = b[1:] != "9" * n
    if tail_partial:
        hi -= 1
    if lo <= hi:  # first digits whose every continuation fits
        first = f'"{lo}"' if lo == hi else f"[{lo}-{hi}]"
        out.append(_seq(first, " ".join(["[0-9]"] * n)))
    if tail_partial:
        out += [_seq(f'"{b[0]}"', rest) for rest in _digits("0" * n, b[1:])]
    return out


def _seq(first: str, rest: str) -> str:
    return f"{first} {rest}".strip()


def _closed(lo: int, hi: int) -> list[str]:
    """Alternatives for the numbers lo..hi (0 <= lo <= hi), without leading zeros."""
    out: list[str] = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        a = max(lo, 10 ** (width - 1) if width > 1 else 0)
        b = min(hi, 10**width - 1)
        if a <= b:
            out += _digits(str(a), str(b))
    return out


MOST_DIGITS = 16  # an open range's numbers, as llama.cpp's own schema converter bounds them


def _open(lo: int) -> list[str]:
    """Alternatives for every number from lo (>= 0) up, of at most MOST_DIGITS digits (or as
    many as lo has): unbounded, a sampled reply once wrote digits to its token limit."""
    width = len(str(lo))
    longer = f"[1-9] [0-9]{{{width},{max(width, MOST_DIGITS - 1)}}}"
    return [*_closed(lo, 10**width - 1), longer]


def _alt(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def int_bounds(schema: dict) -> tuple[int | None, int | None]:
    """The inclusive bounds of an integer schema (minimum, exclusiveMinimum, ...; None: open)."""
    lo = hi = None
    if "minimum" in schema:
        lo = math.ceil(schema["minimum"])
    if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
        bound = math.floor(schema["exclusiveMinimum"]) + 1
        lo = bound if lo is None else max(lo, bound)
    if "maximum" in schema:
        hi = math.floor(schema["maximum"])
    if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
        bound = math.ceil(schema["exclusiveMaximum"]) - 1
        hi = bound if hi is None else min(hi, bound)
    return lo, hi


def int_range_rule(lo: int | None, hi: int | None) -> str:
    """A GBNF rule body for the integers lo..hi (None: no bound that way), as JSON writes them,
    followed by the converter's `space` rule. Raises ValueError when none fits."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"no integer is at least {lo} and at most {hi}")
    parts: list[str] = []
    if lo is None or lo < 0:  # the negative ones: "-" then their magnitude
        small = 1 if hi is None or hi >= 0 else -hi
        mags = _open(small) if lo is None else _closed(small, -lo)
        parts.append('"-" ' + _alt(mags))
    if hi is None or hi >= 0:
        start = 0 if lo is None or lo < 0 else lo
        parts += _open(start) if hi is None else _closed(start, hi)
    return "(" + " | ".join(parts) + ") space"
