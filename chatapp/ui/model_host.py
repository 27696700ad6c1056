"""The model behind the chat: loading it (and again after a crash), switching it, its card."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from textual import on, work
from textual.widgets import Input
from textual.worker import Worker, WorkerState

from chatapp import jsonfile
from chatapp.chat.session import ChatSession
from chatapp.config import Config
from chatapp.engine.factory import make_engine
from chatapp.engine.local.machine import physical_cores
from chatapp.engine.protocol import Engine, EngineCrashed, EngineError, LoadOptions, ModelInfo
from chatapp.errors import ChatappError
from chatapp.sampling import SamplerSettings
from chatapp.ui import autotune_watch
from chatapp.ui.messages import EngineFailed, EngineReady, NoticeShown
from chatapp.ui.pacing import FramePacer
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.model_card import ModelCardScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.shell import ChatShell
from chatapp.ui.streaming import SMOOTH, WORKER_NICE, cadence_for
from chatapp.ui.widgets.get_models import GetModelsView
from chatapp.ui.widgets.hub_downloads import DownloadState, HubDownloads
from chatapp.ui.widgets.stats import LiveStats
from chatapp.ui.widgets.tokens import ShownToken


class ModelHost(ChatShell):
    """Loads the engine in a thread (GPU step-down and CPU fallbacks happen in its start()),
    hands it to the session when ready, and replaces it on demand. ChatApp says when it is
    `busy` and what happens once a model is ready or failed."""

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        session: ChatSession,
        options: LoadOptions | None = None,
        config: Config | None = None,
        settings: SamplerSettings | None = None,
        model_label: str = "",
        theme_name: str | None = None,
        remember_theme: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(config, settings, model_label, theme_name, remember_theme)
        self.session = session
        self.options = options
        self.engine_factory = engine_factory
        self.engine: Engine | None = None  # set when loaded; the session gets it when ready
        self._starting: Engine | None = None  # the engine being loaded, until it is ready
        self._loading = False
        self.load_error: str | None = None  # why the last load failed (None: it did not)
        self.cadence = SMOOTH  # how often a streaming reply is drawn (set per model)
        self.pacer = FramePacer(SMOOTH)  # ... and paced by what its frames cost here
        self.downloads = HubDownloads(self)  # F8's Hub downloads: they outlive the dialog

    @property
    def info(self) -> ModelInfo | None:
        return self.session.info

    @property
    def busy(self) -> bool:
        """Whether a reply is in progress (then the model stays as it is)."""
        return False

    def model_ready(self) -> None:
        """Called once a model is loaded and attached to the session."""

    def model_failed(self) -> None:
        """Called when a load failed (the message is shown already)."""

    def start_engine(self) -> None:
        if self._loading:
            return
        self._loading = True
        self.set_status("loading the model…")
        self.stats_panel.stats = LiveStats(state="loading")
        self._load_engine()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _load_engine(self) -> None:
        try:
            if self.engine is not None:
                self.engine.close()
            engine = self._starting = self.engine_factory()
            info = engine.start()  # GPU step-down and CPU fallbacks happen inside
            for note in engine.notes:
                self.post_message(NoticeShown(note))
        except EngineCrashed as exc:
            self.post_message(EngineFailed(str(exc), exc.log_tail, crashed=True))
            return
        except ChatappError as exc:  # EngineError, or a ModelFileError from the file check
            self.post_message(EngineFailed(str(exc)))
            return
        except Exception as exc:  # shown to the user, app keeps running
            self.post_message(EngineFailed(f"could not start the model: {exc}"))
            return
        self.post_message(EngineReady(info, engine))

    def on_engine_ready(self, message: EngineReady) -> None:
        if message.engine is not None:
            self.engine = message.engine
        self._loading = False
        self._starting = None
        self.session.attach(self.engine, message.info)
        self.cadence = cadence_for(message.info, physical_cores())
        self.stats_panel.info = message.info
        self.stats_panel.stats = LiveStats(state="ready", n_ctx=message.info.n_ctx)
        name = Path(message.info.path).name
        self.sub_title = f"{name} · ctx {message.info.n_ctx}"
        self.set_status(f"ready: {name} loaded in {message.info.load_s:.2f} s")
        self.model_ready()
        if autotune_watch.wanted(self.config) and hasattr(self.engine, "start_autotune"):
            engine = self.engine
            self.run_worker(
                lambda: autotune_watch.follow(self, engine),
                thread=True, exclusive=True, group="autotune", exit_on_error=False,
            )  # fmt: skip

    def on_autotune_changed(self, message: autotune_watch.AutotuneChanged) -> None:
        """The tune on first use moved on: the status line while idle, one notice at the end,
        and the Speed panel shows what runs now."""
        line, note = autotune_watch.describe(message.status)
        crashed = message.status.get("state") == "crashed"
        if line and not self.busy:
            self.set_status(line, error=crashed)
        if note and crashed:
            self.notify(note, title="Tune crashed", severity="error", markup=False, timeout=10)
        elif note:
            self.notify(note, title="Tuned for this machine", timeout=8)
        if message.status.get("state") == "done" and self.engine is not None:
            self.session.info = self.engine.info
            self.stats_panel.info = self.engine.info

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Any background task of the app that failed: one readable line, never a traceback
        (the workers run with exit_on_error=False; most report their own errors first)."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            what = event.worker.name or event.worker.group or "a background task"
            self.notify(f"{what} failed: {error}", title="Error", severity="error", timeout=10)

    def on_engine_failed(self, message: EngineFailed) -> None:
        self.load_error = message.message
        self._loading = False
        self._starting = None
        self.engine = None
        self.session.detach()
        self.stats_panel.stats = self.stats_panel.stats.but(state="no model")
        self.set_status(f"error: {message.message}", error=True)
        self.notify(message.message, title="Model not loaded", severity="error", timeout=10)
        self.model_failed()

    def action_restart_engine(self) -> None:
        if not self.busy:
            self.start_engine()

    def switch_model(self, options: LoadOptions) -> None:
        """Load another model file (the conversation stays)."""
        self.options = options
        self.engine_factory = lambda: make_engine(options, nice=WORKER_NICE)
        self.start_engine()

    def action_pick_model(self) -> None:
        if self.options is None:
            self.notify("Connected to a server: there is no local model to switch.")
            return
        if self.busy or self._loading:
            self.notify("Wait for the reply (Esc stops it) or the load to finish first.")
            return

        def done(options: LoadOptions | None) -> None:
            if options is not None:
                self.model_label = Path(options.model_path).name
                self.switch_model(options)  # the conversation stays

        picker = ModelPickerScreen(
            self.options,
            config_dirs=self.config.model_dirs,
            select=self.downloads.latest,
            download=self.downloads.state,
        )
        self.push_screen(picker, done)

    def action_model_card(self) -> None:
        if self.info is None:
            self.notify("No model is loaded yet.")
            return
        self.push_screen(ModelCardScreen.from_info(self.info))

    def action_compare_models(self, files: Sequence[str] = ()) -> None:
        source = self.info.path if self.info else (self.options and self.options.model_path)
        options = getattr(self, "compare_options", None)
        self.push_screen(CompareScreen(source=source or None, files=files, options=options))

    # ---- Hub downloads (F8's Get models view) ---------------------------------------------

    def on_get_models_view_download_asked(self, message: GetModelsView.DownloadAsked) -> None:
        if not self.downloads.start(message.files, message.compare):
            self.notify("A download is under way: wait for it, or stop it (Esc in the chat).")

    def on_get_models_view_stop_asked(self, message: GetModelsView.StopAsked) -> None:
        self.downloads.stop()

    def stop_download(self) -> None:
        """Esc in the chat with no reply streaming: stop the Hub download, if one runs."""
        if self.downloads.stop():
            self.set_status("stopping the download…")

    def on_hub_downloads_changed(self, message: HubDownloads.Changed) -> None:
        self._show_download(message.state)

    def on_hub_downloads_finished(self, message: HubDownloads.Finished) -> None:
        self._show_download(message.state)
        if message.state.error:
            self.notify(message.state.line, title="Download failed", severity="error", timeout=10)
        paths = list(message.paths)
        if not paths:
            return
        self.downloads.latest = paths[-1]
        for screen in self.screen_stack:
            if isinstance(screen, ModelPickerScreen):
                screen.downloaded(paths)
        names = ", ".join(message.names)
        self.notify(f"{names}: selected in F8 (Models)", title="Downloaded", timeout=8)
        if message.compare:
            self.action_compare_models(paths)

    def _show_download(self, state: DownloadState) -> None:
        self.downloads.state = state
        esc = "" if self.busy else " · Esc stops"  # while a reply streams, Esc stops that
        line = f"{state.head}{esc} · {state.detail}" if state.running else state.line
        self.set_status(line, state.error)
        for screen in self.screen_stack:
            if isinstance(screen, ModelPickerScreen):
                screen.download = state

    # ---- the tokenizer box ----------------------------------------------------------------

    @on(Input.Changed, "#tokenizer-input")
    def on_tokenizer_input(self, message: Input.Changed) -> None:
        self._tokenize_typed(message.value)

    @work(thread=True, exclusive=True, group="tokenize", exit_on_error=False)
    def _tokenize_typed(self, text: str) -> None:
        if self.engine is None or not text:
            self.call_from_thread(self.token_panel.show_typed, [])
            return
        try:
            pieces = self.engine.tokenize(text, special=True)
        except EngineError as exc:
            self.call_from_thread(self.set_status, f"error: {exc}", True)
            return
        shown = [ShownToken(p.id, p.piece, special=p.special) for p in pieces]
        self.call_from_thread(self.token_panel.show_typed, shown)

    def on_mount(self) -> None:
        jsonfile.listen(self._file_kept_aside)

    def _file_kept_aside(self, sentence: str) -> None:
        """A saved file that did not parse was renamed aside: say where (from any thread)."""
        self.notify(sentence, title="Saved file kept aside", severity="warning", markup=False,
                    timeout=20)  # fmt: skip

    async def on_unmount(self) -> None:
        """Quit does not wait for the model: its worker is killed whatever it does (a load, a
        tune, a capture, a reply), so the threads waiting on it end at once and the process
        exits (Python joins those threads before it does)."""
        jsonfile.unlisten(self._file_kept_aside)
        for engine in (self._starting, self.engine):
            if engine is not None:
                engine.kill("the app is quitting")
                engine.close()
