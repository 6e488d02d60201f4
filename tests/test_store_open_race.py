"""Openers of one new session database at once (the proxy and its live exporter open the same file
as the proxy starts): setting WAL mode takes an exclusive lock that does not wait out the busy
timeout, and a second opener failed 'database is locked' (a CI run of tests/test_otel_live.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.store import SessionStore


def _open_and_write(path: Path, start: threading.Barrier, errors: list[Exception]) -> None:
    start.wait()
    try:
        with SessionStore(path) as store:
            store.create_session(model="gpt-4o")
    except Exception as exc:
        errors.append(exc)


def test_openers_of_a_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    for attempt in range(30):
        path, start, errors = tmp_path / f"new-{attempt}.db", threading.Barrier(3), []
        openers = [threading.Thread(target=_open_and_write, args=(path, start, errors)) for _ in range(3)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
        assert not errors, (attempt, errors)
        with SessionStore(path, read_only=True) as store:
            assert len(store.list_sessions()) == 3
