"""Tune on first use, seen from the chat: the worker's tune begins after a load, its progress
shows in the status line, and what it chose is said once and shown in the Speed panel."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from textual.message import Message

from chatapp.engine.protocol import EngineError

POLL_S = 0.5
OFF_ENV = "CHATAPP_AUTOTUNE"  # "0" turns the tune on first use off whatever config says


def wanted(config) -> bool:
    """Whether the chat tunes on first use: config's `autotune`, unless CHATAPP_AUTOTUNE=0
    (the test suite sets it: a tune changing settings mid-test would make runs differ)."""
    return bool(config.autotune) and os.environ.get(OFF_ENV, "1") != "0"


@dataclass
class AutotuneChanged(Message):
    """The tune's status (engine.autotune_status()); a newer one replaces an older one."""

    status: dict

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AutotuneChanged)


def describe(status: dict) -> tuple[str, str]:
    """(status line, notification) for a status; the notification is "" while tuning."""
    state = status.get("state")
    if state == "tuning":
        pct = 100 * status.get("done", 0) // max(status.get("total", 1), 1)
        return f"tuning for this machine: {pct}% (your messages go first)", ""
    if state == "failed":
        return "", f"the tune on first use failed: {status.get('error')}; `chatapp tune` measures"
    if state == "crashed":
        line = "error: the tune on first use crashed the model worker; the next message starts it"
        return line, str(status.get("error"))
    gain = status.get("gain_over_before")
    faster = f", {gain:.2f}x the defaults" if gain and gain > 1.005 else ""
    saved = (
        "saved for this file"
        if status.get("saved")
        else "not saved: other programs kept the CPU busy, so it is measured again next time"
    )
    line = f"tuned: {status.get('chosen')}{faster} ({saved})"
    return line, line


def follow(app, engine) -> None:
    """In a thread worker: start the engine's tune and post its status until it ends."""
    if not engine.start_autotune():
        return
    last = None
    while True:
        time.sleep(POLL_S)
        try:
            status = engine.autotune_status()
        except EngineError:  # the engine was closed or replaced: nothing to follow
            return
        if status is None:
            return
        if status != last:
            app.post_message(AutotuneChanged(status))
            last = status
        if status.get("state") != "tuning":
            return
