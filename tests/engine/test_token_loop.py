"""The token loop's check for messages from the parent between tokens."""

from __future__ import annotations

import multiprocessing as mp

from chatapp.engine.local.loop import reply_loop


def test_the_loop_sees_a_message_only_when_one_is_waiting():
    """What the token loop polls between tokens: a real pipe, and the fallback where the
    platform has no select.poll (Windows)."""
    a, b = mp.Pipe()
    waiting = reply_loop.message_waiting(a)
    assert not waiting()
    b.send(("cancel",))
    assert waiting()
    assert a.recv() == ("cancel",)
    assert not waiting()
    b.close()
    assert waiting()  # the parent went away: recv() then raises EOFError, as before
    a.close()


def test_the_poll_fallback_is_the_connections_own(monkeypatch):
    monkeypatch.delattr(reply_loop.select, "poll")
    a, b = mp.Pipe()
    assert reply_loop.message_waiting(a) == a.poll
    a.close()
    b.close()
