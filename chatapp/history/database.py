"""The history's SQLite file: opening it (schema checks, WAL, migration), transactions, errors."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from chatapp import paths
from chatapp.history.records import StoreError
from chatapp.history.schema import SCHEMA_VERSION, describe_error, migrate, rollback, set_wal

DB_NAME = "history.db"
BUSY_TIMEOUT_MS = 5000


def default_db_path() -> Path:
    """The history database in the data dir (CHATAPP_DATA_DIR overrides the dir)."""
    return paths.data_dir() / DB_NAME


class Database:
    """One connection to the history file, shared by threads under a lock: every write is one
    short `BEGIN IMMEDIATE` transaction (`_write`), reads go through `_read`, and every
    sqlite3 error becomes a StoreError that names the action and the file. A file deleted or
    replaced while open is refused rather than written into its lost inode."""

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        read_only: bool = False,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        """The database file."""
        self.read_only = read_only
        """Opened with mode=ro: every write raises StoreError."""
        self._timeout_s = busy_timeout_ms / 1000
        self._lock = threading.RLock()
        self._conn = self._connect(busy_timeout_ms)
        self._ident = self._file_ident()

    # -- opening -------------------------------------------------------------------------

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        directory = self.path.parent
        if self.path.is_dir():
            raise StoreError(
                f"the history database {self.path} is a directory; move it away or set "
                "CHATAPP_DATA_DIR"
            )
        if self.read_only:
            if not self.path.is_file():
                raise StoreError(f"there is no history database at {self.path}")
            target, uri = f"{self.path.resolve().as_uri()}?mode=ro", True
        else:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot create the data directory {directory} ({exc.strerror or exc}); "
                    "set CHATAPP_DATA_DIR to a writable directory"
                ) from None
            target, uri = str(self.path), False
        conn = None
        try:
            conn = sqlite3.connect(
                target, uri=uri, isolation_level=None, check_same_thread=False, timeout=0
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the history database {self.path} was written by a newer chatapp "
                    f"(schema {version}, this one knows {SCHEMA_VERSION}); upgrade chatapp or "
                    "set CHATAPP_DATA_DIR"
                )
            if self.read_only and version < SCHEMA_VERSION:
                raise StoreError(
                    f"the history database {self.path} has an older schema ({version}); "
                    "open it once with write access to upgrade it"
                )
            if not self.read_only:
                set_wal(conn, self._timeout_s)
                conn.execute("PRAGMA synchronous = NORMAL")
                if version < SCHEMA_VERSION:
                    migrate(conn)
            conn.execute("PRAGMA foreign_keys = ON")
        except StoreError:
            if conn is not None:
                conn.close()
            raise
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise self._error(exc, "open the history") from None
        return conn

    def _file_ident(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_dev, st.st_ino

    def close(self) -> None:
        """Close the connection (the last one out checkpoints the WAL)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions and errors -------------------------------------------------------------

    @contextmanager
    def _write(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_file(action)
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            except sqlite3.Error as exc:
                raise self._error(exc, action) from None

    @contextmanager
    def _read(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise self._error(exc, action) from None

    def _check_file(self, action: str) -> None:
        """SQLite would write on into a deleted file's inode and lose it all on close."""
        try:
            ident = self._file_ident()
        except FileNotFoundError:
            ident = None
        if ident != self._ident:
            what = "deleted" if ident is None else "replaced"
            raise StoreError(
                f"could not {action}: the history database {self.path} was {what} while chatapp "
                "was running; this conversation is only in memory now"
            )

    def _error(self, exc: sqlite3.Error, action: str) -> StoreError:
        return StoreError(f"could not {action}: {describe_error(exc, self.path, self._timeout_s)}")
