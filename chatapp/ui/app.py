"""The chat app: its lifecycle, themes, keymap and palette, the model's slot, the F-key screens
of the model (F8 models, F9 card, F10 compare) and F1's help. The chat is ChatScreen's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from textual import on
from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import AwaitMount
from textual.worker import Worker, WorkerState

from chatapp import jsonfile
from chatapp.chat.recorder import ChatHistory
from chatapp.chat.session import ChatSession
from chatapp.config import Config
from chatapp.engine.protocol import Engine, LoadOptions
from chatapp.sampling import SamplerSettings
from chatapp.ui import autotune_watch, themes
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.keys import help_rows, key_of
from chatapp.ui.literal import LiteralApp
from chatapp.ui.screens.chat import ChatScreen
from chatapp.ui.screens.compare import CompareScreen
from chatapp.ui.screens.help import HelpScreen
from chatapp.ui.screens.model_card import ModelCardScreen
from chatapp.ui.screens.models import ModelPickerScreen
from chatapp.ui.screens.versus import VersusScreen
from chatapp.ui.streaming import ReplyStream
from chatapp.ui.widgets.get_models import GetModelsView
from chatapp.ui.widgets.hub_downloads import DownloadState, HubDownloads


class ChatApp(LiteralApp):
    """Chat with a local model and watch tokens, speed and probabilities live. The app keeps
    the model (an EngineSlot) and what outlives a screen (themes, keys, Hub downloads); the
    chat is its ChatScreen, whose ConversationPane owns the conversation and the live reply."""

    CSS_PATH = "app.tcss"
    TITLE = "chatapp"
    # Screen classes for app.tcss: narrow, the chat and the panels in turn; broad, the lesson's
    # text a column of its own; short, no sparkline.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide"), (160, "-broad")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]

    def __init__(
        self,
        engine_factory: Callable[[], Engine],
        *,
        settings: SamplerSettings | None = None,
        system_prompt: str = "",
        model_label: str = "",
        theme_name: str | None = None,
        remember_theme: Callable[[str], None] | None = None,
        history: ChatHistory | None = None,
        options: LoadOptions | None = None,
        startup_notes: Iterable[str] = (),
        config: Config | None = None,
        compare_options: LoadOptions | None = None,
    ) -> None:
        super().__init__()
        self.config = config or Config()  # its presets, model_dirs and [keys] are used here
        self.model_label = model_label
        self.startup_notes = list(startup_notes)
        # How F10's comparison loads each file (GPU layers, threads, flash attention, repack):
        # config.toml and the command line, as `chatapp compare` (None: CPU-only defaults).
        self.compare_options = compare_options
        self._remember_theme = remember_theme
        self._wanted_theme = theme_name
        self._theme_installed = False  # after on_mount's: a new theme is the user's pick
        self.theme_problems: list[str] = []
        self.slot = EngineSlot(self, engine_factory, options)
        self.downloads = HubDownloads(self)  # F8's Hub downloads: they outlive the dialog
        history = history or ChatHistory(None, self._warn)
        session = ChatSession(history, settings, system_prompt)
        self.chat_screen = ChatScreen(session, self.slot, self.config, settings)
        self.versus: VersusScreen | None = None  # `chat A --vs B`: opens instead of the chat

    @property
    def first_screen(self) -> ChatScreen | VersusScreen:
        """The screen the app opens on: the chat, or two files side by side (`--vs`)."""
        return self.versus or self.chat_screen

    def get_default_screen(self) -> Screen:
        return self.first_screen

    @property
    def busy(self) -> bool:
        """Whether a reply is in progress (then the model stays as it is)."""
        return self.chat_screen.pane.busy

    def set_status(self, text: str, error: bool = False) -> None:
        self.chat_screen.pane.set_status(text, error)

    # ---- start and end --------------------------------------------------------------------

    async def on_mount(self) -> None:
        self.set_keymap(self.config.keymap)  # [keys]: binding id -> key
        self.theme_problems = themes.install(self, self._wanted_theme)
        self._theme_installed = True
        self.sub_title = self.model_label
        for note in self.startup_notes:
            self.notify(note, title="Config", severity="warning", timeout=10)
        jsonfile.listen(self._file_kept_aside)
        first = self.first_screen
        await AwaitMount(first, [first])  # laid out before the app says it is ready

    def _warn(self, message: str) -> None:
        self.notify(message, title="History", severity="warning", timeout=10)

    def _file_kept_aside(self, sentence: str) -> None:
        """A saved file that did not parse was renamed aside: say where (from any thread)."""
        self.notify(sentence, title="Saved file kept aside", severity="warning", markup=False,
                    timeout=20)  # fmt: skip

    async def on_unmount(self) -> None:
        """Quit does not wait for the model: its worker is killed whatever it does (a load, a
        tune, a capture, a reply), so the threads waiting on it end at once and the process
        exits (Python joins those threads before it does)."""
        jsonfile.unlisten(self._file_kept_aside)
        self.slot.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Any background task of the app that failed: one readable line, never a traceback
        (the workers run with exit_on_error=False; most report their own errors first)."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            what = event.worker.name or event.worker.group or "a background task"
            self.notify(f"{what} failed: {error}", title="Error", severity="error", timeout=10)

    @on(EngineSlot.Noted)
    @on(ReplyStream.Noted)
    def show_note(self, message: EngineSlot.Noted | ReplyStream.Noted) -> None:
        """The engine's note on its load or its reply (a fallback taken...)."""
        self.notify(message.message, title="Note", severity="warning")

    # ---- themes, help, palette ------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Panel colours for themes that do not set them (Textual's built-in ones)."""
        return dict(themes.PANEL_DEFAULTS)

    def watch_theme(self, name: str) -> None:
        if self._remember_theme is not None and self._theme_installed:
            self._remember_theme(name)

    def action_next_theme(self) -> None:
        names = sorted(self.available_themes)
        ours = [n for n in names if n.startswith("chatapp-")] or names
        i = ours.index(self.theme) if self.theme in ours else -1
        self.theme = ours[(i + 1) % len(ours)]
        self.notify(f"theme: {self.theme}")

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self)))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        chat = self.first_screen
        for b in chat.BINDINGS:
            if not isinstance(b, Binding):
                continue
            action = b.action
            yield SystemCommand(
                b.description,
                f"{b.description} ({key_of(self, b)})",
                lambda a=action: self.run_action(a, chat),
            )
        for name in chat.sampler.presets:
            yield SystemCommand(
                f"Preset: {name}",
                f"Sampler preset {name}",
                lambda n=name: chat.sampler.apply_preset(n),
            )

    # ---- the model ------------------------------------------------------------------------

    def on_engine_slot_ready(self, message: EngineSlot.Ready) -> None:
        info = self.slot.ready(message)
        self.sub_title = f"{Path(info.path).name} · ctx {info.n_ctx}"
        self.chat_screen.pane.model_ready(info)
        self.slot.autotune(self.config)

    def on_engine_slot_failed(self, message: EngineSlot.Failed) -> None:
        self.slot.failed(message)
        self.chat_screen.pane.model_failed(message.message)
        self.notify(message.message, title="Model not loaded", severity="error", timeout=10)

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
        engine = self.slot.engine
        done = message.status.get("state") == "done"
        if done and engine is not None and engine.info is not None:
            self.chat_screen.pane.tuned(engine.info)

    def action_restart_engine(self) -> None:
        if not self.busy:
            self.chat_screen.pane.start_model()

    def switch_model(self, options: LoadOptions) -> None:
        """Load another model file (the conversation stays)."""
        self.slot.use(options)
        self.chat_screen.pane.start_model()

    def action_pick_model(self) -> None:
        if self.slot.options is None:
            self.notify("Connected to a server: there is no local model to switch.")
            return
        if self.busy or self.slot.loading:
            self.notify("Wait for the reply (Esc stops it) or the load to finish first.")
            return

        def done(options: LoadOptions | None) -> None:
            if options is not None:
                self.model_label = Path(options.model_path).name
                self.switch_model(options)  # the conversation stays

        picker = ModelPickerScreen(
            self.slot.options,
            config_dirs=self.config.model_dirs,
            select=self.downloads.latest,
            download=self.downloads.state,
        )
        self.push_screen(picker, done)

    def action_model_card(self) -> None:
        info = self.chat_screen.session.info
        if info is None:
            self.notify("No model is loaded yet.")
            return
        self.push_screen(ModelCardScreen.from_info(info))

    def action_compare_models(self, files: Sequence[str] = ()) -> None:
        info, options = self.chat_screen.session.info, self.slot.options
        source = info.path if info else (options and options.model_path)
        screen = CompareScreen(source=source or None, files=files, options=self.compare_options)
        # closed, its last comparison is the chat's (the lesson's fit step quotes its rows)
        self.push_screen(screen, lambda _: self.chat_screen.compared(screen.result))

    # ---- Hub downloads (F8's Get models view) ---------------------------------------------

    def on_get_models_view_download_asked(self, message: GetModelsView.DownloadAsked) -> None:
        if not self.downloads.start(message.files, message.compare):
            self.notify("A download is under way: wait for it, or stop it (Esc in the chat).")

    def on_get_models_view_stop_asked(self, message: GetModelsView.StopAsked) -> None:
        self.downloads.stop()

    def action_stop_download(self) -> None:
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
