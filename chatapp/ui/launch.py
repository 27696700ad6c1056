"""Build the app for the command line: engine, config, remembered theme, history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chatapp.chat.recorder import ChatHistory
from chatapp.config import Config
from chatapp.config_state import effective_theme, save_theme
from chatapp.engine.factory import make_engine
from chatapp.engine.protocol import Engine, LoadOptions
from chatapp.engine.steering import Steering
from chatapp.sampling import SamplerSettings
from chatapp.ui.app import ChatApp
from chatapp.ui.engine_slot import EngineSlot
from chatapp.ui.screens.versus import VersusScreen
from chatapp.ui.streaming import WORKER_NICE


def binding_ids() -> set[str]:
    """The ids of chatapp's key bindings: the names the [keys] table may rebind."""
    from textual.binding import Binding
    from textual.dom import DOMNode

    ids: set[str] = set()
    todo = [DOMNode]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("chatapp."):
            ids.update(b.id for b in cls.BINDINGS if isinstance(b, Binding) and b.id)
    return ids


def build_app(
    options: LoadOptions,
    server: str | None = None,
    *,
    remote: dict | None = None,
    config: Config | None = None,
    problems: list[str] | None = None,
    compare_options: LoadOptions | None = None,
    steering: Steering | None = None,
    lesson_step: int | None = None,
) -> ChatApp:
    """The chat app on a local model (or a server); `lesson_step`: opened at that step of
    the lesson (`chatapp lesson`)."""
    config = config or Config()
    remote_options = {k: v for k, v in (remote or {}).items() if v}

    def factory() -> Engine:
        return make_engine(options, server, nice=WORKER_NICE, **remote_options)

    label = server or Path(options.model_path).name
    notes = list(problems or [])
    known = binding_ids()
    notes += [
        f"config.toml: keys.{name} is not a key binding id (see F1 for them)"
        for name in config.keymap
        if name not in known
    ]

    def remember(name: str) -> None:
        try:
            save_theme(name, config)
        except Exception:  # remembering a theme is best effort
            pass

    history = ChatHistory.open(notes.append)
    app = ChatApp(
        factory,
        history=history,
        settings=config.sampler,
        system_prompt=config.system_prompt,
        model_label=label,
        theme_name=effective_theme(config),
        remember_theme=remember,
        options=None if server else options,
        startup_notes=notes,
        config=config,
        compare_options=compare_options,
    )
    history.warn = app._warn
    app.chat_screen.session.steering = steering  # `chat --steer`: every reply
    app.chat_screen.lesson.begin_at = lesson_step
    return app


def versus_app(
    factories: tuple[Callable[[], Engine], Callable[[], Engine]],
    labels: tuple[str, str],
    *,
    settings: SamplerSettings | None = None,
    history: ChatHistory | None = None,
    config: Config | None = None,
    notes: list[str] | None = None,
) -> ChatApp:
    """The chat app opening on two files side by side: a VersusScreen whose two conversation
    panes each load their file through an EngineSlot of their own."""
    config = config or Config()
    app = ChatApp(
        factories[0],
        config=config,
        theme_name=effective_theme(config),
        startup_notes=notes or (),
        model_label=" vs ".join(labels),
    )
    app.title = "chatapp: side by side"
    history = history or ChatHistory(None, app._warn)
    slots = (
        EngineSlot(app, factories[0], group="load-a"),
        EngineSlot(app, factories[1], group="load-b"),
    )
    app.versus = VersusScreen(slots, labels, config=config, history=history, settings=settings)
    return app


def run_versus_app(
    options: LoadOptions,
    other: str,
    *,
    config: Config | None = None,
    problems: list[str] | None = None,
) -> None:
    """Two files side by side (`chatapp chat A --vs B`): each prompt to both, greedy."""
    from dataclasses import replace

    from chatapp.cpus import usable_cpus

    if options.n_threads is None:
        # Two workers each with a thread per core oversubscribe the CPU, and llama.cpp's
        # threads then wait on each other at every barrier (measured: ~1 token/s each on 2
        # cores instead of ~40): each gets half the CPUs this process may use.
        options = replace(options, n_threads=max(1, usable_cpus() // 2))
    options = replace(options, draft_model=None)  # the files as they are: no drafts
    second = replace(options, model_path=other)
    history = ChatHistory.open(lambda message: None)
    app = versus_app(
        (
            lambda: make_engine(options, nice=WORKER_NICE),
            lambda: make_engine(second, nice=WORKER_NICE),
        ),
        (Path(options.model_path).name, Path(other).name),
        history=history,
        config=config,
        notes=problems,
    )
    history.warn = app._warn
    app.run()


def run_chat_app(options: LoadOptions, server: str | None = None, **kwargs) -> None:
    """Open the TUI on a local model (or a server): build_app's options."""
    build_app(options, server=server, **kwargs).run()
