"""How long a draft should be: its chance of acceptance per basis, what a batch costs here."""

from __future__ import annotations

DRAFT_MAX = 16  # the most tokens one draft proposes
# Acceptance comes in runs: a draft that continues a copy the reply is following is nearly
# always right, the first token of a new lookup far less often, and the less so the shorter
# the stretch of text the reply shares with the place it was found (free-form text matches
# two or three tokens of a common phrase; a rewrite shares whole sentences). So a draft's
# first token has a chance per basis (how the place drafted from was found), and each token
# after a right one a chance of its own (NEXT); (right, compared) as priors. A copy's first
# token counts as a next one.
BASIS_PRIORS = {
    "short": (1.0, 2.0),  # a lookup sharing fewer than 4 tokens with the text's end
    "mid": (1.5, 2.0),  # 4 to 7
    "long": (1.75, 2.0),  # 8 to drafts.COPY_RUN - 1
    "near": (1.5, 2.0),  # found again just after a replaced word
    "": (3.0, 4.0),  # a draft model's draft
}
PRIOR_NEXT = (9.0, 10.0)
FORGET = 0.9  # each new observation of acceptance weighs this much more than the one before
FORGET_FIRST = 0.8  # (first tokens are compared once a draft: fewer observations)
# A batch's cost in one-row decodes before this model is measured here: 1 + 0.85 (rows - 1)^0.7
# (the 2-core EPYC with the bundled model: 2 rows 1.85, 4 rows 2.72, 8 rows 4.18, 16 rows 7.09);
# once some row count is measured, the curve is scaled to it (a GPU's batches cost far less).
PRIOR_ROW, PRIOR_EXP = 0.85, 0.7
WORTH = 1.05  # a draft must promise 5% more tokens per second than none, or none is drafted


class Rate:
    """A chance estimated from outcomes, recent ones weighing more (`forget`)."""

    def __init__(self, prior: tuple[float, float], forget: float = FORGET) -> None:
        self.hits, self.trials = prior
        self.forget = forget

    @property
    def value(self) -> float:
        return self.hits / self.trials

    def observe(self, hit: bool) -> None:
        self.hits = self.hits * self.forget + (1.0 if hit else 0.0)
        self.trials = self.trials * self.forget + 1.0


class DraftPolicy:
    """How many tokens to draft next: the length k that maximises the tokens a batch is
    expected to yield over what it costs, or 0 when no length beats one token at a time.

    A draft's first token is right with chance f (its basis's, or NEXT for a copy), each
    further one with chance a given the one before (NEXT): k tokens yield
    1 + f (1 - a^k) / (1 - a). Its batch of k + 1 rows costs what this model measured on this
    CPU at the current thread count (a batch of rows is far from free on a CPU: 2 rows cost
    ~1.85-2.04 and 16 rows ~7-8 one-row decodes on the 2-core EPYC with the bundled model),
    plus what proposing cost (a draft model's own decodes). Lookups made while not drafting
    are still compared with the tokens that came, so a text that turns repetitive is noticed."""

    def __init__(self, costs: dict[int, float] | None = None, high: int = DRAFT_MAX) -> None:
        self.firsts = {basis: Rate(prior, FORGET_FIRST) for basis, prior in BASIS_PRIORS.items()}
        self.next = Rate(PRIOR_NEXT)
        self.costs: dict[int, float] = {} if costs is None else costs  # rows -> seconds
        self.propose_s = 0.0  # seconds per proposed token (a draft model's decodes)
        self.high = high
        # length() runs between every two decodes, drafting or not: the batch costs in one-row
        # decodes are kept as a table (remade when a batch is timed anew or a one-row decode
        # drifts 5%), and the last answer is kept for the same inputs.
        self._table: list[float] | None = None
        self._table_one = 0.0
        self._last: tuple = ()
        self._last_k = 0

    @property
    def first(self) -> Rate:
        """The first-token chance of a draft with no basis of its own (a draft model's)."""
        return self.firsts[""]

    def use_costs(self, costs: dict[int, float]) -> None:
        """Batch costs measured elsewhere (another thread count's): from now on these."""
        self.costs = costs
        self._table = None

    def chance(self, basis: str) -> Rate:
        return self.next if basis == "copy" else self.firsts.get(basis, self.first)

    def observe(self, accepted: int, compared: int, basis: str = "") -> None:
        """A draft's tokens compared with what was sampled, in order, and how many of them
        matched before the first that did not; `basis`: how its place was found."""
        for i in range(compared):
            (self.next if i else self.chance(basis)).observe(i < accepted)

    def timed(self, rows: int, seconds: float) -> None:
        """A decode of `rows` rows took `seconds` (a running average per row count)."""
        old = self.costs.get(rows)
        self.costs[rows] = seconds if old is None else 0.8 * old + 0.2 * seconds
        if rows > 1 or old is None:
            self._table = None

    def proposed(self, tokens: int, seconds: float) -> None:
        if tokens > 0:
            self.propose_s = 0.8 * self.propose_s + 0.2 * seconds / tokens

    def cost(self, rows: int) -> float:
        """A batch of `rows` rows in one-row decodes: measured, else the prior curve scaled to
        the nearest measured row count, else the prior curve."""
        one = self.costs.get(1)
        if not one:
            return _prior(rows)
        if rows in self.costs:
            return self.costs[rows] / one
        known = [r for r in self.costs if r > 1]
        if not known:
            return _prior(rows)
        near = min(known, key=lambda r: abs(r - rows))
        return _prior(rows) * (self.costs[near] / one) / _prior(near)

    def length(self, room: int, basis: str = "") -> int:
        """Tokens to draft now (0: decode one token at a time)."""
        a = min(self.next.value, 0.999)
        f = self.chance(basis).value
        top = min(room, self.high)
        table = self._cost_table()
        key = (f, a, top, self.propose_s, table)
        if key == self._last:  # (a remade table with the same costs compares equal: same answer)
            return self._last_k
        best_k, best = 0, WORTH
        one = self.costs.get(1) or 0.0
        proposing = self.propose_s / one if one else 0.0
        a_k = 1.0
        for k in range(1, top + 1):
            a_k *= a
            gain = (1.0 + f * (1.0 - a_k) / (1.0 - a)) / (table[k + 1] + k * proposing)
            if gain > best:
                best_k, best = k, gain
        self._last, self._last_k = key, best_k
        return best_k

    def _cost_table(self) -> list[float]:
        """cost(rows) for rows 0..high + 1, kept while the measured costs stand."""
        one = self.costs.get(1) or 0.0
        table = self._table
        if table is None or abs(one - self._table_one) > 0.05 * self._table_one:
            table = self._table = [0.0, *(self.cost(r) for r in range(1, self.high + 2))]
            self._table_one = one
        return table


def _prior(rows: int) -> float:
    return 1.0 + PRIOR_ROW * (rows - 1) ** PRIOR_EXP
