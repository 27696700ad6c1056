"""The loaded model's card: header facts, memory at the current ctx, and a what-if table."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.validation import Number
from textual.widgets import Input, Label, Static

from chatapp.engine.protocol import ALL_GPU_LAYERS, ModelInfo, gpu_layer_total
from chatapp.models import fit
from chatapp.ui.literal import literal
from chatapp.ui.screens.model_read import Picked, read_model
from chatapp.ui.screens.models import Machine
from chatapp.ui.widgets.model_card import CardView, FitView, machine_memory, what_if_markup

DEFAULT_PARAMS_B = 8.0


class ModelCardScreen(ModalScreen[None]):
    """What the loaded model is and what it costs here; Esc closes."""

    DEFAULT_CSS = """
    ModelCardScreen { align: center middle; }
    ModelCardScreen > Vertical { width: 95%; max-width: 140; height: 90%;
        border: round $primary; border-title-color: $primary; background: $surface;
        padding: 0 1; }
    ModelCardScreen #card-main { height: auto; }
    ModelCardScreen #card-left { width: 1fr; height: auto; }
    ModelCardScreen #card-right { width: 1fr; height: auto; border-left: solid $panel; }
    ModelCardScreen .section { color: $accent; text-style: bold; padding: 0 1; }
    ModelCardScreen #card-loaded { padding: 0 1; color: $text-muted; height: auto; }
    ModelCardScreen .opts { height: 3; }
    ModelCardScreen .opts Label { padding: 1 1 0 1; }
    ModelCardScreen .opts Input { width: 14; }
    ModelCardScreen #what-if { padding: 0 1; height: auto; }
    ModelCardScreen #card-hint { color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="card.close")]

    class Read(Message):
        """The model file's header was read; machine memory measured."""

        def __init__(self, picked: Picked, gpu_free: int | None, ram_free: int | None) -> None:
            super().__init__()
            self.picked = picked
            self.gpu_free = gpu_free
            self.ram_free = ram_free

    def __init__(
        self,
        path: str,
        n_ctx: int = 4096,
        n_gpu_layers: int = ALL_GPU_LAYERS,
        info: ModelInfo | None = None,
        machine: Machine = machine_memory,
    ) -> None:
        super().__init__()
        self.path = path
        self.n_ctx = n_ctx
        self.n_gpu_layers = n_gpu_layers
        self.info = info
        self.machine = machine
        self.gpu_free: int | None = None
        self.ram_free: int | None = None

    @classmethod
    def from_info(cls, info: ModelInfo, machine: Machine = machine_memory) -> ModelCardScreen:
        """The card of a loaded model, with its actual ctx and GPU layers."""
        return cls(info.path, info.n_ctx, info.n_gpu_layers, info=info, machine=machine)

    def compose(self) -> ComposeResult:
        box = Vertical()
        box.border_title = "Model card"
        with box, VerticalScroll():
            with Horizontal(id="card-main"):
                with Vertical(id="card-left"):
                    yield Static("Model card", classes="section")
                    yield Static(literal(self._loaded_text()), id="card-loaded")
                    yield CardView(id="card-card")
                with Vertical(id="card-right"):
                    yield Static(f"Memory at ctx {self.n_ctx:,}", classes="section")
                    yield FitView(id="card-fit")
            yield Static("What if: another model size", classes="section")
            with Horizontal(classes="opts"):
                yield Label("billion params")
                yield Input(
                    f"{DEFAULT_PARAMS_B:g}",
                    type="number",
                    validators=[Number(*fit.WHAT_IF_PARAMS_B)],
                    id="whatif-params",
                )
                yield Label("memory GiB")
                memory = Number(*fit.WHAT_IF_MEMORY_GIB)
                yield Input("", type="number", validators=[memory], id="whatif-mem")
            yield Static("", id="what-if")
            yield Static("Esc closes", id="card-hint")

    def _loaded_text(self) -> str:
        i = self.info
        if i is None:
            return self.path
        gpu = f"{i.n_gpu_layers} of {gpu_layer_total(i.n_layers)} layers on the GPU"
        if not i.gpu_offload_supported:
            gpu = "CPU only (this llama.cpp has no GPU offload)"
        loaded = f"loaded in {i.load_s:.2f} s · ctx {i.n_ctx:,} · {i.n_threads} threads"
        return f"{i.path}\n{loaded} · {gpu}"

    def on_mount(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, group="card-read", exit_on_error=False)
    def _read(self) -> None:
        picked = read_model(self.path)
        self.post_message(self.Read(picked, *self.machine()))

    def on_model_card_screen_read(self, message: Read) -> None:
        self.gpu_free, self.ram_free = message.gpu_free, message.ram_free
        picked = message.picked
        card_view = self.query_one(CardView)
        card_view.error = picked.error
        card_view.card = picked.card
        mem = self.query_one("#whatif-mem", Input)
        if not mem.value:
            memory = self.gpu_free or self.ram_free or 16 * fit.GIB
            mem.value = f"{memory / fit.GIB:.1f}"
        if picked.shape is not None:
            view = self.query_one(FitView)
            view.trained_ctx = picked.card.context_length if picked.card else 0
            view.report = fit.fit_report(
                picked.shape, self.n_ctx, self.n_gpu_layers, self.gpu_free, self.ram_free
            )
        self._update_what_if()

    @on(Input.Changed, "#whatif-params, #whatif-mem")
    def _what_if_changed(self, event: Input.Changed) -> None:
        self._update_what_if()

    def _update_what_if(self) -> None:
        out = self.query_one("#what-if", Static)
        values = []
        for wid in ("#whatif-params", "#whatif-mem"):
            widget = self.query_one(wid, Input)
            result = widget.validate(widget.value)
            if not widget.value or (result is not None and not result.is_valid):
                out.update("[$error]give a positive number of billions and of GiB[/]")
                return
            values.append(float(widget.value))
        params_b, mem_gib = values
        out.update(what_if_markup(params_b, int(mem_gib * fit.GIB), self.n_ctx))
