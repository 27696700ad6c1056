"""The socket of a server's reply in progress, shut from any thread to cancel the reply."""

from __future__ import annotations

import socket
import threading


class ReplySocket:
    """Remembers the socket httpx opens for a reply (its connect trace) so that cancel()
    shuts it at once from any thread; `cancelled` is set from cancel() to the next reply."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def cancel(self) -> None:
        """Mark the reply cancelled and shut its socket, if one is open."""
        self.cancelled.set()
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def trace(self, name: str, info: dict) -> None:
        """httpx's trace hook: keep the socket once connected (shut it if already cancelled)."""
        if name == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
            if self.cancelled.is_set() and sock is not None:
                self.cancel()

    def forget(self) -> None:
        """The reply is over: its socket is no longer ours to shut."""
        with self._lock:
            self._sock = None
