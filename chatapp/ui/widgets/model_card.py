"""Model card, memory fit and what-if views, drawn from GGUF headers and chatapp.models.fit."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from chatapp.engine.protocol import gpu_layer_total, resolved_gpu_layers
from chatapp.gguf.header import ModelCard
from chatapp.models import fit
from chatapp.models.card_rows import card_rows
from chatapp.ui.literal import literal, template


def machine_memory() -> tuple[int | None, int | None]:
    """Free GPU memory (all NVIDIA GPUs together, None without one) and available RAM."""
    gpus = fit.gpu_memory()
    return (sum(g.free_bytes for g in gpus) if gpus else None), fit.ram_available()


def fits(report: fit.FitReport) -> bool:
    """Whether the estimate fits the free RAM and (with a GPU) the free GPU memory."""
    e = report.estimate
    if report.ram_available_bytes is not None and e.ram_bytes > report.ram_available_bytes:
        return False
    gpu = report.gpu_free_bytes
    return not (gpu and e.gpu_bytes > gpu - fit.GPU_RESERVE)


def ngl_text(ngl: int, n_layers: int) -> str:
    """llama.cpp's GPU layer count in words (ALL_GPU_LAYERS or gpu_layer_total = all)."""
    total = gpu_layer_total(n_layers)
    if resolved_gpu_layers(ngl, n_layers) == total:
        return f"all ({total})"
    return str(ngl)


def _rows(rows: list[tuple[str, str]], width: int = 16) -> Content:
    return Content("\n").join(
        template("[b]$label[/]$value", label=f"{label:<{width}}", value=value)
        for label, value in rows
    )


def card_content(card: ModelCard) -> Content:
    """A model card: its rows, then its warnings."""
    warnings = (template("[$warning]⚠ $why[/]", why=warning) for warning in card.warnings)
    return Content("\n").join([_rows(card_rows(card)), *warnings])


def fit_content(report: fit.FitReport, trained_ctx: int = 0) -> Content:
    """A fit report: the parts, the machine, the verdict."""
    e, n = report.estimate, report.n_layers
    gpu = report.gpu_free_bytes
    total = e.weights_bytes + e.kv_bytes + e.compute_bytes
    rows = [
        ("weights", fit.gib(e.weights_bytes)),
        ("KV cache", f"{fit.gib(e.kv_bytes)} (f16, ctx {e.n_ctx:,})"),
        ("compute", f"{fit.gib(e.compute_bytes)} (estimate)"),
        ("total", fit.gib(total)),
        ("RAM free", fit.gib(report.ram_available_bytes)),
        ("GPU free", fit.gib(gpu) if gpu else "no GPU found"),
        (
            "GPU layers",
            f"{report.gpu_layers_fit} of {gpu_layer_total(n)} fit" if gpu else "none (CPU only)",
        ),
    ]
    if gpu:
        split = f"GPU {fit.gib(e.gpu_bytes)}, RAM {fit.gib(e.ram_bytes)}"
        rows.append(("split", f"{split} at {ngl_text(e.n_gpu_layers, n)} GPU layers"))
    badge = "[b reverse $success] fits [/]"
    if not fits(report):
        badge = "[b reverse $error] does not fit [/]"
    lines = [_rows(rows), template(f"{badge} [$text-muted]$verdict[/]", verdict=report.verdict)]
    if trained_ctx and e.n_ctx > trained_ctx:
        lines.append(
            Content.from_markup(
                f"[$warning]⚠ ctx {e.n_ctx:,} is above the trained {trained_ctx:,} tokens[/]"
            )
        )
    return Content("\n").join(lines)


def what_if_markup(params_b: float, memory: int, n_ctx: int) -> str:
    """The what-if table (an N-billion model at F16..Q2_K vs a memory size) as markup."""
    ref, rows = fit.what_if(params_b, memory, n_ctx)
    out = [
        f"A {params_b:g}B model (KV sized like {ref}) at ctx {n_ctx:,} vs {fit.gib(memory)}:",
        f"[b]{'quant':<8}{'bpw':>6}{'weights':>12}{'KV':>11}{'compute':>11}{'total':>12}  fits[/]",
    ]
    for r in rows:
        verdict = "[$success]yes[/]" if r.fits else "[$error]no[/]"
        out.append(
            f"{r.quant:<8}{r.bits_per_weight:>6.2f}{fit.gib(r.weights_bytes):>12}"
            f"{fit.gib(r.kv_bytes):>11}{fit.gib(r.compute_bytes):>11}"
            f"{fit.gib(r.total_bytes):>12}  {verdict}"
        )
    return "\n".join(out)


class CardView(Static):
    """A model card, or the sentence saying why the file cannot be loaded."""

    DEFAULT_CSS = """
    CardView { height: auto; padding: 0 1; }
    CardView.error { color: $error; text-style: bold; }
    """

    card: reactive[ModelCard | None] = reactive(None)
    """The card shown (None: nothing, or the error)."""
    error: reactive[str] = reactive("")
    """Why the file cannot be loaded; shown instead of the card when set."""

    def watch_card(self) -> None:
        self._draw()

    def watch_error(self) -> None:
        self._draw()

    def _draw(self) -> None:
        self.set_class(bool(self.error), "error")
        if self.error:
            self.update(literal(f"✗ {self.error}"))
        elif self.card is not None:
            self.update(card_content(self.card))
        else:
            self.update("[$text-muted]no model selected[/]")


class FitView(Static):
    """Memory needed at the chosen ctx and GPU layers vs this machine's free memory."""

    DEFAULT_CSS = """
    FitView { height: auto; padding: 0 1; }
    """

    report: reactive[fit.FitReport | None] = reactive(None)
    """The fit shown (None: nothing to estimate)."""
    trained_ctx: int = 0  # the model's trained context, for a warning above it

    def watch_report(self, report: fit.FitReport | None) -> None:
        if report is None:
            self.update("")
        else:
            self.update(fit_content(report, self.trained_ctx))
