"""Both stores keep to the SessionStoreBackend interface, on the same base, and write the same rows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from engine.importers import import_files
from engine.store import SessionStore, SessionStoreBackend
from engine.store.backend import SqlDatabase
from engine.store.costs import stored_request_costs
from engine.store.factory import open_store
from engine.store.postgres import PostgresSessionStore
from engine.store.sql_store import SqlSessionStore
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

needs_server = pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
FIXTURES = Path(__file__).parent / "fixtures"


def test_the_sqlite_store_is_a_session_store_backend(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        assert isinstance(store, SessionStoreBackend)
        # on the database it holds (what only SQLite has), which never calls the store back
        assert isinstance(store._db, SqlDatabase) and not isinstance(store._db, SqlSessionStore)


@needs_server
def test_the_postgres_store_is_a_session_store_backend() -> None:
    with open_store(fresh_url()) as store:
        assert isinstance(store, SessionStoreBackend) and isinstance(store, PostgresSessionStore)
        assert isinstance(store._db, SqlDatabase) and not isinstance(store._db, SqlSessionStore)


@pytest.mark.parametrize("store_class", [SessionStore, PostgresSessionStore], ids=["sqlite", "postgresql"])
def test_every_public_store_method_is_part_of_the_interface(store_class: type) -> None:
    assert issubclass(store_class, SqlSessionStore)
    ours = {n for n, f in inspect.getmembers(store_class, inspect.isfunction) if not n.startswith("_")}
    interface = {n for n in dir(SessionStoreBackend) if not n.startswith("_")}
    assert ours == interface, f"keep engine/store/backend.py in step: {sorted(ours ^ interface)}"


def _rows(store: SqlSessionStore) -> dict[str, object]:
    """What an import wrote, without row ids and write times (each backend numbers its own)."""
    out: dict[str, object] = {}
    for s in store.list_sessions():
        out[s.id] = (
            [m.message for m in store.load_messages(s.id)],
            [e.model_dump(exclude={"id", "created_utc"}) for e in store.list_events(s.id)],
            [
                {
                    k: v
                    for k, v in r.items()
                    if k not in ("event_id", "computed_utc", "call_utc", "day", "gap_s")
                }
                for r in stored_request_costs(store, s.id)
            ],
            [
                r.model_dump(exclude={"id", "event_id", "started_utc"})
                for r in store.list_requests(s.id, with_body=True)
            ],
        )
    return out


@needs_server
def test_an_import_writes_the_same_rows_and_costs_on_both_backends(tmp_path: Path) -> None:
    """Real agents' transcripts (Claude Code with exact requests, Codex, OpenHands): every message,
    event, exact request and cost row is the same whichever backend recorded it."""
    files = [
        *sorted((FIXTURES / "sessions").glob("claude-code__*.jsonl")),
        next((FIXTURES / "real_agents" / "codex").rglob("rollout-*.jsonl")),
        FIXTURES / "real_agents" / "claude-code" / "compact_auto" / "transcripts"
        / "005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl",
    ]  # fmt: skip
    with SessionStore(tmp_path / "s.db") as lite, open_store(fresh_url()) as pg:
        for store in (lite, pg):
            results = import_files(files, store)
            assert len(results) == len(files) and all(r.sessions for r in results)
        on_sqlite, on_pg = _rows(lite), _rows(pg)
    assert on_sqlite == on_pg
    assert sum(len(v[2]) for v in on_sqlite.values()) > 10  # cost rows were written
