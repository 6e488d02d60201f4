"""Refusing to write into a damaged SQLite file: PRAGMA quick_check, bounded in time.

A small file is checked as it is opened for writing. A large one (a year of history: 1.5 GB read
in about a second) is checked in a thread on a connection of its own while the caller goes on
reading (SQLite runs the check without Python's lock), and its verdict is awaited before the first
write: a re-import that finds every file unchanged writes nothing and never waits for it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from engine.errors import StoreError

logger = logging.getLogger(__name__)

#: Longest a check runs before the write goes ahead anyway (large databases).
INTEGRITY_CHECK_BUDGET_S = 2.0
#: Files from this size are checked beside the caller's work, not before the open returns.
BACKGROUND_CHECK_BYTES = 64 * 1024 * 1024


def check_integrity(
    conn: sqlite3.Connection, path: Path, *, stop: Callable[[], bool] = lambda: False
) -> None:
    """Raise StoreError when ``conn``'s database is damaged (PRAGMA quick_check); skipped after
    :data:`INTEGRITY_CHECK_BUDGET_S`, or as soon as ``stop()`` says so."""
    deadline = time.monotonic() + INTEGRITY_CHECK_BUDGET_S
    conn.set_progress_handler(lambda: 1 if stop() or time.monotonic() > deadline else 0, 10_000)
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            logger.info("quick_check of %s stopped before its end", path)
            return
        raise damaged(exc, path) from exc
    except sqlite3.DatabaseError as exc:
        raise damaged(exc, path) from exc
    finally:
        conn.set_progress_handler(None, 0)
    problems = [r[0] for r in rows if r[0] != "ok"]
    if problems:
        raise damaged("; ".join(problems)[:300], path)


def damaged(why: object, path: Path) -> StoreError:
    """The error that refuses a write into a damaged file, saying why."""
    return StoreError(f"database is damaged ({why}); not writing into it", path=str(path))


class BackgroundCheck:
    """:func:`check_integrity` of a file in a thread, on a read-only connection of its own."""

    def __init__(self, path: Path, connect: Callable[[Path], sqlite3.Connection]) -> None:
        self.path = path
        self._stopped = False
        self._error: StoreError | None = None
        self._thread = threading.Thread(
            target=self._run, args=(connect,), name="ctxdesk-quick-check", daemon=True
        )
        self._thread.start()

    def _run(self, connect: Callable[[Path], sqlite3.Connection]) -> None:
        try:
            conn = connect(self.path)
        except sqlite3.DatabaseError as exc:
            self._error = damaged(exc, self.path)
            return
        try:
            check_integrity(conn, self.path, stop=lambda: self._stopped)
        except StoreError as exc:
            self._error = exc
        finally:
            conn.close()

    def verdict(self) -> None:
        """Wait for the check; raise its StoreError when the file is damaged."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """End the check early (the database is being closed without having written)."""
        self._stopped = True
        self._thread.join()
