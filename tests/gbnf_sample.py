"""Random texts from a GBNF grammar as the schema converter writes it, no model needed."""

from __future__ import annotations

import random
import re

# Every choice the grammar leaves open is drawn, so a test sees escapes, odd characters and
# lengths a model would rarely write. Deep recursion is cut short by the cheapest way out.

_NAME = re.compile(r"[a-zA-Z0-9-]+")
_COUNT = re.compile(r"\{(\d+)(,(\d*))?\}")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/"}
# Characters tried for a negated class: the awkward ones first.
_POOL = list('"\\\n\t\x00\x1f\x7f aZ09-_.é€😀\u2028{}[]/') + [chr(c) for c in range(0x20, 0x7F)]
MAX_CODE = 0x10FFFF


class Grammar:
    """A parsed grammar: rules by name, each an expression tree of tuples."""

    def __init__(self, text: str) -> None:
        self.rules: dict[str, tuple] = {}
        for line in text.splitlines():
            if line.strip():
                name, body = line.split(" ::= ", 1)
                parser = _Parser(body)
                self.rules[name.strip()] = parser.alternatives()
                assert parser.i == len(body), (name, body[parser.i :])
        self.cost = self._costs()

    def _costs(self) -> dict[str, float]:
        """The fewest rule expansions each rule needs to finish (a fixed point)."""
        cost = dict.fromkeys(self.rules, float("inf"))
        for _ in range(len(self.rules) + 2):
            for name, tree in self.rules.items():
                cost[name] = min(cost[name], self._cost(tree, cost))
        return cost

    def _cost(self, node: tuple, cost: dict[str, float]) -> float:
        kind = node[0]
        if kind == "alt":
            return min(self._cost(n, cost) for n in node[1])
        if kind == "seq":
            return sum(self._cost(n, cost) for n in node[1])
        if kind == "ref":
            return 1 + cost[node[1]]
        if kind == "rep":
            return node[2] * self._cost(node[1], cost) if node[2] else 0
        return 0

    def sample(self, rnd: random.Random, start: str = "root") -> str:
        out: list[str] = []
        self._write(("ref", start), rnd, out, 0)
        return "".join(out)

    def _write(self, node: tuple, rnd: random.Random, out: list[str], depth: int) -> None:
        kind = node[0]
        deep = depth > 6 or len(out) > 400
        if kind == "lit":
            out.append(node[1])
        elif kind == "cls":
            out.append(_char(node[1], node[2], rnd))
        elif kind == "ref":
            self._write(self.rules[node[1]], rnd, out, depth + 1)
        elif kind == "seq":
            for n in node[1]:
                self._write(n, rnd, out, depth)
        elif kind == "alt":
            options = node[1]
            if deep:
                pick = min(options, key=lambda n: self._cost(n, self.cost))
            else:
                pick = rnd.choice(options)
            self._write(pick, rnd, out, depth)
        else:  # rep
            _, sub, low, high = node
            top = low if deep else (high if high is not None else low + 3)
            for _ in range(rnd.randint(low, max(low, top))):
                self._write(sub, rnd, out, depth + 1)


def _char(negate: bool, ranges: list[tuple[int, int]], rnd: random.Random) -> str:
    def inside(c: int) -> bool:
        return any(lo <= c <= hi for lo, hi in ranges) != negate

    if not negate:
        lo, hi = rnd.choice(ranges)
        for _ in range(50):
            c = rnd.randint(lo, hi) if rnd.random() < 0.7 else rnd.choice((lo, hi))
            if not 0xD800 <= c <= 0xDFFF:
                return chr(c)
        raise AssertionError(f"no character in {ranges}")
    for ch in rnd.sample(_POOL, len(_POOL)):
        if inside(ord(ch)):
            return ch
    for _ in range(1000):
        c = rnd.randint(0, MAX_CODE)
        if inside(c) and not 0xD800 <= c <= 0xDFFF:
            return chr(c)
    raise AssertionError(f"no character outside {ranges}")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def peek(self) -> str:
        while self.i < len(self.text) and self.text[self.i] == " ":
            self.i += 1
        return self.text[self.i] if self.i < len(self.text) else ""

    def alternatives(self) -> tuple:
        seqs = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            seqs.append(self.sequence())
        return seqs[0] if len(seqs) == 1 else ("alt", seqs)

    def sequence(self) -> tuple:
        terms = []
        while self.peek() not in ("", "|", ")"):
            terms.append(self.postfix(self.term()))
        return ("seq", terms)

    def term(self) -> tuple:
        c = self.peek()
        if c == '"':
            self.i += 1
            chars = []
            while self.text[self.i] != '"':
                chars.append(self.char())
            self.i += 1
            return ("lit", "".join(chars))
        if c == "[":
            self.i += 1
            negate = self.text[self.i] == "^"
            self.i += negate
            ranges = []
            while self.text[self.i] != "]":
                lo = ord(self.char())
                hi = lo
                if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                    self.i += 1
                    hi = ord(self.char())
                ranges.append((lo, hi))
            self.i += 1
            return ("cls", negate, ranges)
        if c == "(":
            self.i += 1
            inner = self.alternatives()
            assert self.peek() == ")", self.text[self.i :]
            self.i += 1
            return inner
        m = _NAME.match(self.text, self.i)
        assert m, f"unexpected {self.text[self.i :]!r}"
        self.i = m.end()
        return ("ref", m.group(0))

    def char(self) -> str:
        c = self.text[self.i]
        self.i += 1
        if c != "\\":
            return c
        e = self.text[self.i]
        self.i += 1
        if e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            code = int(self.text[self.i : self.i + width], 16)
            self.i += width
            return chr(code)
        return _ESCAPES[e]

    def postfix(self, term: tuple) -> tuple:
        while True:
            c = self.text[self.i] if self.i < len(self.text) else ""
            if c in ("*", "+", "?"):
                self.i += 1
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{":
                m = _COUNT.match(self.text, self.i)
                assert m, self.text[self.i :]
                self.i = m.end()
                low = int(m.group(1))
                high = low if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            else:
                return term
            term = ("rep", term, low, high)
