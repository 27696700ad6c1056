"""The model behind the chat: loading it (and again after a crash), switching it, its tune."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.app import App
from textual.message import Message
from textual.message_pump import MessagePump

from chatapp.config import Config
from chatapp.cpus import usable_cores
from chatapp.engine.factory import make_engine
from chatapp.engine.protocol import Engine, EngineCrashed, LoadOptions, ModelInfo
from chatapp.errors import ChatappError
from chatapp.ui import autotune_watch
from chatapp.ui.streaming import SMOOTH, WORKER_NICE, Cadence, cadence_for


class EngineSlot:
    """Where the engine lives: loaded in a thread of `host` (GPU step-down and CPU fallbacks
    happen in its start()), whose `listener` (the host, or a screen with slots of its own) gets
    Ready or Failed and hands them back here (`ready`, `failed`) on its own thread: the loading
    thread never assigns this state."""

    @dataclass
    class Ready(Message):
        """A model loaded: its info, and the started engine."""

        slot: EngineSlot
        info: ModelInfo
        engine: Engine

    @dataclass
    class Failed(Message):
        """The engine could not start; `log_tail` has llama.cpp's last lines."""

        slot: EngineSlot
        message: str
        log_tail: str = ""
        crashed: bool = False

    @dataclass
    class Noted(Message):
        """The engine's note on its load (a fallback taken...)."""

        message: str

    def __init__(
        self,
        host: App,
        factory: Callable[[], Engine],
        options: LoadOptions | None = None,
        group: str = "engine",  # the worker group of its loads (one slot's loads replace its own)
        listener: MessagePump | None = None,  # where its messages go (None: the host)
    ) -> None:
        self.host = host
        self.group = group
        self.listener = listener
        self.factory = factory
        self.options = options  # the local file's load options (None: a server)
        self.engine: Engine | None = None  # set when loaded
        self.starting: Engine | None = None  # the engine being loaded, until it is ready
        self.loading = False
        self.load_error: str | None = None  # why the last load failed (None: it did not)
        self.cadence: Cadence = SMOOTH  # how often a streaming reply is drawn (set per model)

    def start(self) -> bool:
        """Load (again) in a thread; False while a load is under way already."""
        if self.loading:
            return False
        self.loading = True
        self.host.run_worker(
            self._load, thread=True, exclusive=True, group=self.group, exit_on_error=False
        )
        return True

    def _load(self) -> None:
        post = (self.listener or self.host).post_message
        try:
            if self.engine is not None:
                self.engine.close()
            engine = self.starting = self.factory()
            info = engine.start()  # GPU step-down and CPU fallbacks happen inside
            for note in engine.notes:
                post(self.Noted(note))
        except EngineCrashed as exc:
            post(self.Failed(self, str(exc), exc.log_tail, crashed=True))
            return
        except ChatappError as exc:  # EngineError, or a ModelFileError from the file check
            post(self.Failed(self, str(exc)))
            return
        except Exception as exc:  # shown to the user, app keeps running
            post(self.Failed(self, f"could not start the model: {exc}"))
            return
        post(self.Ready(self, info, engine))

    def ready(self, message: EngineSlot.Ready) -> ModelInfo:
        """The load is done (on the host's thread)."""
        self.engine = message.engine
        self.loading = False
        self.starting = None
        self.cadence = cadence_for(message.info, usable_cores())
        return message.info

    def failed(self, message: EngineSlot.Failed) -> None:
        self.load_error = message.message
        self.loading = False
        self.starting = None
        self.engine = None

    def lost(self) -> None:
        """The worker died while replying: the next message starts a new one."""
        self.engine = None

    def use(self, options: LoadOptions) -> None:
        """Load another model file from the next start()."""
        self.options = options
        self.factory = lambda: make_engine(options, nice=WORKER_NICE)

    def autotune(self, config: Config) -> None:
        """Tune on first use, where config wants it and the engine can (its progress comes to
        the host as AutotuneChanged)."""
        engine = self.engine
        if autotune_watch.wanted(config) and engine is not None and engine.capabilities.autotune:
            self.host.run_worker(
                lambda: autotune_watch.follow(self.host, engine),
                thread=True, exclusive=True, group="autotune", exit_on_error=False,
            )  # fmt: skip

    def close(self) -> None:
        """Quit does not wait for the model: its worker is killed whatever it does (a load, a
        tune, a capture, a reply), so the threads waiting on it end at once."""
        for engine in (self.starting, self.engine):
            if engine is not None:
                engine.kill("the app is quitting")
                engine.close()
