"""A schema's `pattern` as GBNF for its JSON string: a subset held to exactly, the rest refused."""

from __future__ import annotations

import json
import re

# The subset is where ECMA-262 (what JSON Schema names) and Python's `re` (what validators such
# as `jsonschema` run) agree: literals, `.`, classes with ranges, \d \w \s, groups, alternatives
# and the quantifiers * + ? {n} {n,} {n,m}. Each character is written as JSON writes it inside a
# string (a quote, a backslash or a control character escaped), so the reply parses and holds
# the very text the pattern matched.

MAX_CODE = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # no text holds them (llama.cpp writes UTF-8)
MAX_COUNT = 500  # a count {n,m} past this is a mistake (the grammar grows with it)
_SETS = {  # ASCII subsets of Python's Unicode classes: every character they take matches
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_CONTROL = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_COUNT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_JSON_SPECIAL = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # escaped inside a JSON string


class PatternError(ValueError):
    """A pattern outside the subset; str() says what, in a few words."""


Ranges = list[tuple[int, int]]


def pattern_gbnf(pattern: str) -> str:
    """GBNF for the text between a JSON string's quotes whose value matches `pattern`
    (`^...$`); PatternError says what is not supported."""
    if len(pattern) < 2 or not (pattern.startswith("^") and pattern.endswith("$")):
        raise PatternError("must start with ^ and end with $ (the reply is the whole string)")
    inner = pattern[1:-1]
    if (len(inner) - len(inner.rstrip("\\"))) % 2:
        raise PatternError("ends with \\$, an escaped $: end it with a plain $")
    parser = _Parser(inner)
    body = parser.alternatives()
    if parser.i < len(inner):
        raise PatternError(f"has a ) at {parser.i + 1} that closes no group")
    return body


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def alternatives(self) -> str:
        seqs = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            seqs.append(self.sequence())
        return seqs[0] if len(seqs) == 1 else "(" + " | ".join(seqs) + ")"

    def sequence(self) -> str:
        parts: list[str] = []
        while self.peek() not in ("", "|", ")"):
            parts.append(self.repeated(self.atom()))
        return " ".join(p for p in parts if p) or '""'

    def atom(self) -> str:
        c = self.peek()
        self.i += 1
        if c == "(":
            if self.peek() == "?":
                raise PatternError("has (?, a group with options, which is not supported")
            body = self.alternatives()
            if self.peek() != ")":
                raise PatternError("has a ( that is never closed")
            self.i += 1
            return f"({body})"
        if c == "[":
            return chars_gbnf(self.char_class())
        if c == ".":
            return chars_gbnf(complement([(0x0A, 0x0A)]))
        if c == "\\":
            return chars_gbnf(self.escape())
        if c in "^$":
            raise PatternError(f"has {c} inside; only its start may be ^ and its end $")
        if c in "*+?":
            raise PatternError(f"has {c} with nothing before it to repeat")
        if c in "{}":
            raise PatternError(f"has a {c} that is not a count like {{2,5}}; write \\{c}")
        return chars_gbnf([(ord(c), ord(c))])

    def repeated(self, atom: str) -> str:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{":
            m = _COUNT.match(self.text, self.i)
            if m is None:
                raise PatternError("has a { that is not a count like {2}, {2,} or {2,5}")
            self.i = m.end()
            low = int(m.group(1))
            high = None if m.group(2) and not m.group(3) else int(m.group(3) or low)
            if high is not None and high < low or max(low, high or 0) > MAX_COUNT:
                raise PatternError(f"has the count {m.group(0)}; counts go from 0 to {MAX_COUNT}")
        else:
            return atom
        if self.peek() == "?":  # lazy: the same strings match
            self.i += 1
        if self.peek() and self.peek() in "*+?{":
            raise PatternError("repeats a repetition (as a** or a*+); group it: (a*)*")
        return repeat(atom, low, high)

    def escape(self) -> Ranges:
        c = self.peek()
        if not c:
            raise PatternError("ends with a lone \\")
        self.i += 1
        if c in _SETS:
            return list(_SETS[c])
        if c in _CONTROL:
            return [(ord(_CONTROL[c]),) * 2]
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = self.text[self.i : self.i + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PatternError(f"has \\{c} without {width} hex digits after it")
            self.i += width
            code = int(digits, 16)
            if SURROGATES[0] <= code <= SURROGATES[1]:
                raise PatternError(f"has \\{c}{digits}, a lone surrogate, which is not text")
            return [(code, code)]
        if c.isascii() and c.isalnum():
            raise PatternError(f"has \\{c}, which is not supported (\\d, \\w, \\s and \\. are)")
        return [(ord(c), ord(c))]

    def char_class(self) -> Ranges:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        if self.peek() == "]":
            raise PatternError("has a class that starts with ]; write \\] for a ]")
        out: Ranges = []
        while self.peek() != "]":
            if not self.peek():
                raise PatternError("has a [ that is never closed")
            pair = self.text[self.i : self.i + 2]
            if pair in ("&&", "||", "--", "~~"):  # (Python may read these as set operations)
                raise PatternError(f"has {pair} inside [...]; escape one of them")
            low = self.class_item(negate)
            if self.peek() == "-" and self.text[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                high = self.class_item(negate)
                if len(low) != 1 or len(high) != 1 or low[0][0] != low[0][1]:
                    raise PatternError("has a range in [...] whose end is a class like \\d")
                if high[0][0] != high[0][1] or high[0][0] < low[0][0]:
                    raise PatternError("has a range in [...] that runs backwards")
                out.append((low[0][0], high[0][0]))
            else:
                out += low
        self.i += 1
        return complement(out) if negate else merged(out)

    def class_item(self, negate: bool) -> Ranges:
        c = self.peek()
        self.i += 1
        if c == "[":
            raise PatternError("has a [ inside [...]; write \\[ for a [")
        if c != "\\":
            return [(ord(c), ord(c))]
        if negate and self.peek() in _SETS:
            raise PatternError(f"has \\{self.peek()} inside [^...], which is not supported")
        return self.escape()


def repeat(unit: str, low: int, high: int | None) -> str:
    """GBNF for `unit` (one term) written low to high times (None: no most)."""
    if high == 0:
        return ""
    if (low, high) == (0, None):
        return unit + "*"
    if (low, high) == (1, None):
        return unit + "+"
    if (low, high) == (0, 1):
        return unit + "?"
    return unit + (f"{{{low},}}" if high is None else f"{{{low},{high}}}")


def merged(ranges: Ranges) -> Ranges:
    """The ranges sorted and joined where they touch."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement(ranges: Ranges) -> Ranges:
    """Every code point of text that is not in `ranges`."""
    out: Ranges = []
    start = 0
    for lo, hi in merged([*ranges, SURROGATES]):
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= MAX_CODE:
        out.append((start, MAX_CODE))
    return out


def minus(ranges: Ranges, cut: Ranges) -> Ranges:
    """`ranges` without the code points of `cut`."""
    return [r for r in _intersect(ranges, complement(cut))]


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo, hi in merged(a):
        for blo, bhi in b:
            if max(lo, blo) <= min(hi, bhi):
                out.append((max(lo, blo), min(hi, bhi)))
    return out


def chars_gbnf(ranges: Ranges) -> str:
    """One GBNF unit for one character from `ranges`, as JSON writes it inside a string: the
    plain ones as a class, a quote, backslash or control character by its escape."""
    plain = minus(ranges, _JSON_SPECIAL)
    special = [c for lo, hi in _intersect(ranges, _JSON_SPECIAL) for c in range(lo, hi + 1)]
    parts = []
    if len(plain) == 1 and plain[0][0] == plain[0][1]:
        parts.append(gbnf_literal(chr(plain[0][0])))
    elif plain:
        body = "".join(
            _class_char(lo) + (f"-{_class_char(hi)}" if hi > lo else "") for lo, hi in plain
        )
        parts.append(f"[{body}]")
    parts += [gbnf_literal(json.dumps(chr(c))[1:-1]) for c in special]
    if not parts:
        raise PatternError("has a class that no character of text matches")
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def _class_char(code: int) -> str:
    ch = chr(code)
    if ch.isascii() and ch.isalnum():
        return ch
    if code < 0x100:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def gbnf_literal(text: str) -> str:
    """A GBNF string literal for `text` (quotes, backslashes and the unprintable escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable() and ch != "\u00a0" and not ch.isspace() or ch == " ":
            out.append(ch)
        else:
            out.append(_class_char(ord(ch)))
    return '"' + "".join(out) + '"'
